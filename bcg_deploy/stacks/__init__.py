"""The deploy stacks people run G1 tracking policies with, each stated from its own code (file:line).

One module per stack: ``motion_tracking_controller`` (BeyondMimic's C++ controller running a whole_body_tracking
or mjlab ONNX), ``unitree`` (unitree_rl_mjlab's and unitree_rl_lab's G1 ``State_Mimic``), ``holosoma``
(holosoma's whole-body-tracking inference); ``bcgd`` is bcgd's own raw-state ONNX (no stack). Each module says
what files the stack loads, how it builds the observation and the targets, its gains, rate and motion indexing,
and what its runtime does beyond that contract (``StackInfo.behaviours``); it reads a policy the stack's way
(every disagreement a finding) and runs it the stack's way (a runtime with ``act(k, qpos, qvel)``).

- ``inspect(path, stack)`` / ``verify(path, stack)``: read a policy as a stack does; the findings.
- ``replay.load_policy``: the policy sim2sim runs (``sim2sim.setup.prepare`` calls it).

This package sits beside ``sim2sim`` (it uses its reference ``Motion`` and ``PolicyMetadata``); nothing in ``training``
or ``export`` imports it.
"""

from bcg_deploy.stacks.inspect import INFOS as INFOS
from bcg_deploy.stacks.inspect import STACKS as STACKS
from bcg_deploy.stacks.inspect import Inspection as Inspection
from bcg_deploy.stacks.inspect import behaviours as behaviours
from bcg_deploy.stacks.inspect import detect as detect
from bcg_deploy.stacks.inspect import inspect as inspect
from bcg_deploy.stacks.inspect import verify as verify

__all__ = ["INFOS", "STACKS", "Inspection", "behaviours", "detect", "inspect", "verify"]
