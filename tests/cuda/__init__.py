"""The CUDA test suite: runs as is on a machine with a CUDA GPU; skipped (with the reason) elsewhere."""

from __future__ import annotations

import pytest
import torch


def _cuda_reason() -> str | None:
    if not torch.cuda.is_available():
        return "CUDA is not available (no GPU or no CUDA driver): tests/cuda runs as is on a GPU machine"
    import warp as wp

    wp.init()
    if not wp.is_cuda_available():
        return "torch sees CUDA but Warp does not (driver or toolkit): tests/cuda needs both"
    return None


REASON = _cuda_reason()
requires_cuda = pytest.mark.skipif(REASON is not None, reason=REASON or "")
