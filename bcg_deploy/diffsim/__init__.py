"""Differentiable articulated-body simulator in NVIDIA Warp (Moreau midpoint, tree-sparse L^T D L).

Public API: ``Simulator``, ``SimConfig``, ``SimState`` (see ``simulator.py`` and ``config.py``).
"""

from bcg_deploy.diffsim.config import SimConfig as SimConfig
from bcg_deploy.diffsim.config import SimState as SimState
from bcg_deploy.diffsim.simulator import Simulator as Simulator

__all__ = ["SimConfig", "SimState", "Simulator"]
