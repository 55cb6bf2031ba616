"""The trainer's device and numerics settings, made explicit (METHOD.md: the gradient path is float32).

- ``resolve_device(name)``: one concrete ``torch.device`` ("cpu" or "cuda:N"; a bare "cuda" is torch's
  current CUDA device), the same one torch and Warp then use (``diffsim.config.resolve_device``).
- ``native_bf16(device)``: whether ``device`` multiplies bf16 in hardware (``bcgd train`` notes a
  ``shac.critic_bf16`` run on a device that does not); ``cpu_flags()``: the CPU's flags it reads.
- ``configure_numerics(device, tf32=False, deterministic=False)``: pins TF32 OFF for CUDA matmuls and cuDNN
  whatever the environment or an earlier import set (``NVIDIA_TF32_OVERRIDE``, ``torch.backends``
  flags), sets float32 matmul precision to "highest", and with ``deterministic`` turns on torch's
  deterministic algorithms (``warn_only``: an op that has none warns; ``CUBLAS_WORKSPACE_CONFIG`` set for
  cuBLAS) and, on CUDA, Warp's run-to-run
  deterministic atomics (CPU kernels are single-threaded, hence deterministic already: setting Warp's
  option there would only recompile the modules). Returns the effective settings (what config.yaml
  records beside the config).
- ``init_warp(device)``: initialise Warp quietly; returns its start-up warning worth showing, if any.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bcg_deploy.diffsim.config import resolve_device as _resolve


def resolve_device(name: str | torch.device) -> torch.device:
    """``name`` as one concrete device ("cuda" -> "cuda:N" with N torch's current device)."""
    return torch.device(_resolve(name))


def native_bf16(device: torch.device | str) -> bool:
    """True when ``device`` multiplies bf16 matrices in hardware: a CUDA device of compute capability 8.0 or
    later, or a CPU whose flags (``/proc/cpuinfo``) list AVX512-BF16 or AMX-BF16. Other CPUs convert bf16 in
    software, which is slower than float32."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)
    if device.type != "cpu":
        return False
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return frozenset(line.split(":", 1)[-1].split())


def numerics_state() -> dict[str, Any]:
    """The torch flags that decide matmul precision and determinism, as plain values."""
    return {
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
    }


def configure_numerics(device: torch.device | str, tf32: bool = False, deterministic: bool = False) -> dict[str, Any]:
    """Set TF32 and determinism for this process (see the module docstring); return ``numerics_state()``
    plus ``warp_deterministic`` (the Warp mode set, or None when left alone)."""
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if not tf32 and os.environ.get("NVIDIA_TF32_OVERRIDE") not in (None, "0"):
        os.environ["NVIDIA_TF32_OVERRIDE"] = "0"  # read by cuBLAS at its first use in this process
    warp_mode = None
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)  # an op without one warns, never stops a run
        torch.backends.cudnn.benchmark = False
        if torch.device(device).type == "cuda":
            import warp as wp

            wp.config.deterministic = wp.DeterministicMode.RUN_TO_RUN
            warp_mode = str(wp.config.deterministic)
    else:
        torch.use_deterministic_algorithms(False)
    return {**numerics_state(), "warp_deterministic": warp_mode}


def init_warp(device: str) -> str | None:
    """Initialise Warp before any progress output, its banner off. Its CUDA-driver warning is written by the
    native library to the process's stderr, so it is captured there and returned as one line, only when it
    matters: a GPU was asked for, or the warning is not about CUDA. None when there is nothing to say."""
    import warp as wp  # Warp takes a second to import: only a process that trains loads it

    wp.config.log_level = wp.LOG_WARNING
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as cap:
        os.dup2(cap.fileno(), 2)
        try:
            wp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        cap.seek(0)
        text = cap.read().decode(errors="replace").strip()
    if text and (not device.startswith("cpu") or "CUDA" not in text):
        return f"warp: {' '.join(text.split())}"
    return None
