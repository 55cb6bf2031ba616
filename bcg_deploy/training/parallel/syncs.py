"""Count host synchronisations: the places where Python waits for the device.

On CUDA every read of a tensor value by the host (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``,
``.cpu()``, ``torch.equal``, ...), every op whose output size depends on tensor values (``nonzero``,
boolean-mask indexing, ``unique``, ``repeat_interleave`` with tensor repeats, ...) and every blocking
host-to-device copy of a Python value makes the host wait until the GPU has drained its queue. A
training loop with such calls in every control step is host-bound on a GPU however fast its kernels are.

``SyncCounter`` counts them over a block of code:

    with SyncCounter() as sc:
        trainer.step()
    sc.count, sc.by_kind, sc.sites   # total, per kind ("item", "bool", "nonzero", ...), per call site

- ``mode="trace"`` (the default on a CPU machine): a ``torch.overrides.TorchFunctionMode`` sees every
  torch call made from Python and counts those that WOULD sync on CUDA (the list is ``SYNC_KINDS``;
  a boolean mask inside ``__getitem__``/``__setitem__``, ``torch.where(cond)`` with one argument and
  ``torch.tensor``/``torch.as_tensor`` of a non-tensor onto an explicit device count too). It runs on
  any device, so the count of a CUDA run can be checked on this CPU. It cannot see calls made inside
  C++ (none of ours sync there); it counts a ``.cpu()`` even when the tensor already is on the CPU,
  but ``.to("cpu")`` only of a tensor on another device; reads inside ``torch.optim`` (host-side step
  counters) are not counted.
- ``mode="cuda"``: ``torch.cuda.set_sync_debug_mode("warn")``; every synchronising CUDA call torch makes
  emits a warning, which is recorded and counted (the ground truth on a GPU).

``read_once(tree)`` is the other half: every tensor of a nested dict/list read by the host in one sync
per device (the way per-iteration metrics and counters accumulated on the device reach the host);
``first_true(mask, count)`` selects rows without the sync of a boolean mask once their number is known.

The module imports nothing but torch, so a benchmark may load it by path into an older checkout of
the project (to count the syncs of the code before a change).
"""

from __future__ import annotations

import collections
import math
import os
import sys
import warnings
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_T = torch.Tensor
SYNC_KINDS: dict[Any, str] = {
    _T.item: "item",
    _T.__bool__: "bool",
    _T.__int__: "int",
    _T.__float__: "float",
    _T.__index__: "index",
    _T.__complex__: "complex",
    _T.tolist: "tolist",
    _T.numpy: "numpy",
    _T.__array__: "numpy",
    _T.cpu: "cpu",
    _T.__repr__: "repr",
    _T.__format__: "repr",
    _T.__contains__: "contains",
    torch.equal: "equal",
    torch.allclose: "equal",
    _T.allclose: "equal",
    _T.equal: "equal",
    torch.nonzero: "nonzero",
    _T.nonzero: "nonzero",
    torch.argwhere: "nonzero",
    _T.argwhere: "nonzero",
    torch.masked_select: "nonzero",
    _T.masked_select: "nonzero",
    torch.unique: "nonzero",
    _T.unique: "nonzero",
    torch.unique_consecutive: "nonzero",
    torch.bincount: "nonzero",
    _T.bincount: "nonzero",
}
"""Torch callables that always synchronise on CUDA, and their kind."""

_REPEAT = {torch.repeat_interleave, _T.repeat_interleave}
_WHERE = {torch.where, _T.where}
_INDEX = {_T.__getitem__: "mask_index", _T.__setitem__: "mask_index"}
_FROM_HOST = {torch.tensor, torch.as_tensor}
_TO = {_T.to}
_TORCH_DIR = os.path.dirname(torch.__file__)
_HOST_STATE_DIRS = (os.path.join(_TORCH_DIR, "optim"),)
"""Torch code whose tensor reads are of host tensors by design (the non-capturable optimisers keep their
step counters on the CPU and read them with ``.item()``): not counted."""
_THIS = os.path.abspath(__file__)


def _has_bool_mask(index: Any) -> bool:
    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool and index.dim() > 0
    if isinstance(index, tuple):
        return any(_has_bool_mask(i) for i in index)
    return False


def sync_kind(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The kind of host sync a torch call ``func(*args, **kwargs)`` would cause on CUDA, or None."""
    kind = SYNC_KINDS.get(func)
    if kind is not None:
        return kind
    if func in _INDEX:
        return "mask_index" if len(args) > 1 and _has_bool_mask(args[1]) else None
    if func in _REPEAT:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        sized = kwargs.get("output_size") is not None
        return "repeat_interleave" if isinstance(repeats, torch.Tensor) and repeats.numel() > 1 and not sized else None
    if func in _WHERE:
        return "nonzero" if len(args) + len(kwargs) == 1 else None
    if func in _FROM_HOST:
        data = args[0] if args else kwargs.get("data")
        return "from_host" if kwargs.get("device") is not None and not isinstance(data, torch.Tensor) else None
    if func in _TO:
        return "cpu" if _to_cpu(args, kwargs) else None
    return None


def _to_cpu(args: tuple, kwargs: dict) -> bool:
    dev = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            dev = a
    if dev is None:
        return False
    return torch.device(dev).type == "cpu" and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu"


def _call_site(frame: FrameType | None) -> str:
    """``file:line`` of the first frame outside torch and this module (the project's call site)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH_DIR) and os.path.abspath(name) != _THIS:
            return f"{os.path.relpath(name) if not name.startswith('<') else name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _TraceMode(TorchFunctionMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        kind = sync_kind(func, args, kwargs)
        if kind is not None:
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(_HOST_STATE_DIRS):
                self.counter._record(kind, _call_site(caller))
        return func(*args, **kwargs)


class SyncCounter:
    """Context manager counting host syncs (see the module docstring); re-entrant use is not supported.

    ``mode``: "trace", "cuda" or "auto" (cuda when CUDA is available, else trace). After the block:
    ``count`` (int), ``by_kind`` and ``sites`` (``collections.Counter``s), ``mode`` (the mode used).
    """

    def __init__(self, mode: str = "auto") -> None:
        if mode == "auto":
            mode = "cuda" if torch.cuda.is_available() else "trace"
        if mode not in ("trace", "cuda"):
            raise ValueError(f"SyncCounter mode: expected 'trace', 'cuda' or 'auto', got {mode!r}")
        self.mode = mode
        self.count = 0
        self.by_kind: collections.Counter = collections.Counter()
        self.sites: collections.Counter = collections.Counter()
        self._ctx: Any = None
        self._caught: list | None = None
        self._prev_debug_mode: int | None = None

    def _record(self, kind: str, site: str) -> None:
        self.count += 1
        self.by_kind[kind] += 1
        self.sites[site] += 1

    def __enter__(self) -> SyncCounter:
        if self.mode == "trace":
            self._ctx = _TraceMode(self)
            self._ctx.__enter__()
        else:
            torch.cuda.synchronize()
            self._ctx = warnings.catch_warnings(record=True)
            self._caught = self._ctx.__enter__()
            warnings.simplefilter("always")
            self._prev_debug_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.mode == "trace":
            self._ctx.__exit__(*exc)
            return
        torch.cuda.set_sync_debug_mode(self._prev_debug_mode or 0)
        self._ctx.__exit__(*exc)
        for w in self._caught or []:
            text = str(w.message)
            if "synchroniz" in text.lower():
                self._record("cuda_sync", f"{os.path.relpath(w.filename)}:{w.lineno}")

    def summary(self, top: int = 10) -> dict[str, Any]:
        """JSON-able ``{"mode", "count", "by_kind", "top_sites"}`` (the ``top`` most frequent call sites)."""
        return {
            "mode": self.mode,
            "count": self.count,
            "by_kind": dict(self.by_kind.most_common()),
            "top_sites": dict(self.sites.most_common(top)),
        }


def first_true(mask: torch.Tensor, count: int) -> torch.Tensor:
    """The indices of the True entries of the 1-D ``mask``, in order, given their number ``count`` (what
    ``mask.nonzero()`` gives, without the host read of the output size)."""
    return torch.argsort((~mask).to(torch.uint8), stable=True)[:count]


def read_once(tree: Any) -> Any:
    """``tree`` (nested dicts, lists and tuples) with every tensor replaced by its value, read in one host sync
    per device: the tensors are flattened into one float64 buffer read with one ``.tolist()``.

    A 0-dim tensor becomes a Python number, a larger one a nested list; bool and integer tensors give bools and
    ints (exact below 2**53), floating ones floats (float32 values exactly). Other leaves are kept as they are.
    """
    leaves: list[torch.Tensor] = []

    def collect(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            leaves.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                collect(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)

    collect(tree)
    values: dict[int, Any] = {}
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for t in leaves:
        by_device.setdefault(t.device, []).append(t)
    for group in by_device.values():
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in group]).tolist()
        i = 0
        for t in group:
            values[id(t)] = _shaped(flat[i : i + t.numel()], t)
            i += t.numel()

    def rebuild(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return values[id(x)]
        if isinstance(x, dict):
            return {k: rebuild(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(rebuild(v) for v in x)
        return x

    return rebuild(tree)


def _shaped(flat: list[float], like: torch.Tensor) -> Any:
    cast = bool if like.dtype == torch.bool else int if not like.is_floating_point() else float
    vals = [cast(v) for v in flat]
    return vals[0] if like.dim() == 0 else _nest(vals, tuple(like.shape))


def _nest(vals: list, shape: tuple[int, ...]) -> list:
    if len(shape) == 1:
        return vals
    step = math.prod(shape[1:])
    return [_nest(vals[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
