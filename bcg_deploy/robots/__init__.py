"""Robots: our MJCF models and their RobotSpec (joint order, gains, limits)."""

from __future__ import annotations

from functools import cache

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots.g1 import g1_spec
from bcg_deploy.robots.spec import ContactPoint as ContactPoint
from bcg_deploy.robots.spec import KeyPoint as KeyPoint
from bcg_deploy.robots.spec import RobotSpec as RobotSpec

ROBOTS = ("g1",)


@cache
def load_robot(name: str = "g1") -> RobotSpec:
    """Return the RobotSpec of a packaged robot (``"g1"``)."""
    if name == "g1":
        return g1_spec()
    raise BcgdError(f"--robot {name}: unknown robot, expected one of {', '.join(ROBOTS)}")


__all__ = ["ContactPoint", "KeyPoint", "RobotSpec", "load_robot", "ROBOTS"]
