"""sim2sim: run an exported policy (policy.onnx) in MuJoCo with latency, noise, randomisation and pushes,
and report how well it tracks its clip. Reads only the ONNX file and the packaged robot model.

Library use::

    from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
    report = run_sim2sim("policy.onnx", Sim2SimConfig(runs=5, latency_ms=(20.0, 20.0)))
    report.write_json("report.json")
"""

from __future__ import annotations

from bcg_deploy.sim2sim.evaluate import run_sim2sim as run_sim2sim
from bcg_deploy.sim2sim.policy import OnnxPolicy as OnnxPolicy
from bcg_deploy.sim2sim.policy import PolicyMetadata as PolicyMetadata
from bcg_deploy.sim2sim.report import Report as Report
from bcg_deploy.sim2sim.runner import simulate_run as simulate_run
from bcg_deploy.sim2sim.setup import RunResult as RunResult
from bcg_deploy.sim2sim.setup import Sim2SimConfig as Sim2SimConfig
from bcg_deploy.sim2sim.setup import prepare as prepare

__all__ = [
    "OnnxPolicy",
    "PolicyMetadata",
    "Report",
    "RunResult",
    "Sim2SimConfig",
    "prepare",
    "run_sim2sim",
    "simulate_run",
]
