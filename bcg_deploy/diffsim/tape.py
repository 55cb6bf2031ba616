"""The step's tape: recorded forward/adjoint Warp launches, and empty replays for array-writing stages.

Warp's backward of a kernel first replays its forward, then runs the adjoints in reverse. Every stage
function here writes all of its results to arrays that nothing overwrites before the backward pass
(each substep owns its arrays), so replaying it would only recompute what is already stored:
``keep_outputs_on_replay`` registers an empty replay for such a function (``wp.func_replay``). The
function's own adjoint still recomputes its local values, so gradients are unchanged.
"""

from __future__ import annotations

import inspect
import linecache

import warp as wp


def keep_outputs_on_replay(func) -> None:
    """Give the Warp function ``func`` (which returns nothing and writes only arrays) an empty replay."""
    if getattr(func, "_bcg_empty_replay", False):  # already registered (a second model shares the function)
        return
    py = func.func
    names = list(inspect.signature(py).parameters)
    name = f"replay_{py.__name__}"
    src = f"def {name}({', '.join(names)}):\n    pass\n"
    # Warp parses the replay's source: keep it where ``inspect`` finds it.
    filename = f"<bcg_diffsim replay {py.__qualname__} {id(py)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(src, filename, "exec"), namespace)
    replay = namespace[name]
    replay.__annotations__ = dict(py.__annotations__)
    replay.__module__ = py.__module__
    wp.func_replay(func)(replay)
    func._bcg_empty_replay = True


def launch_cmd(kernel, dim, inputs, outputs, device, adj_inputs=None, adj_outputs=None) -> wp.Launch:
    """A recorded launch (``wp.Launch``) of ``kernel``; the adjoint launch when adjoints are given.

    In ``adj_inputs``, ``None`` stands for "no adjoint" and is replaced by a zero of the argument's type
    for non-array arguments (scalars, vectors)."""
    if adj_inputs is None:
        return wp.launch(kernel, dim, inputs=inputs, outputs=outputs, device=device, record_cmd=True)
    adj_inputs = [
        type(x)() if a is None and not isinstance(x, wp.array) else a for x, a in zip(inputs, adj_inputs, strict=True)
    ]
    return wp.launch(
        kernel, dim, inputs=inputs, outputs=outputs, adj_inputs=adj_inputs, adj_outputs=adj_outputs,
        adjoint=True, device=device, record_cmd=True,
    )  # fmt: skip


class ZeroCmd:
    """A recorded "zero these adjoint arrays" command with the ``launch(stream)`` interface.

    On CPU a Warp memset (captured into graphs); on CUDA torch's ``zero_`` on the current torch stream,
    the stream the simulator launches on."""

    def __init__(self, arrays: list):
        self.arrays = arrays
        self.views = [wp.to_torch(a) for a in arrays]

    def launch(self, stream=None) -> None:
        if stream is None:
            for a in self.arrays:
                a.zero_()
        else:
            for v in self.views:
                v.zero_()


class Recorder:
    """Collects forward launches and (when ``grad``) their adjoint launches, in launch order."""

    def __init__(self, device: str, dim: int, grad: bool):
        self.device, self.dim, self.grad = device, dim, grad
        self.fwd: list = []
        self.adj: list = []

    def add(self, kernel, inputs: list, outputs: list, adj_inputs: list | None = None, adj_outputs=None, dim=None):
        """A forward launch and, when recording gradients, Warp's adjoint of it (launch grid ``dim``,
        default one thread per env)."""
        dim = self.dim if dim is None else dim
        self.fwd.append(launch_cmd(kernel, dim, inputs, outputs, self.device))
        if self.grad:
            self.adj.append(launch_cmd(kernel, dim, inputs, outputs, self.device, adj_inputs, adj_outputs))

    def add_forward(self, kernel, inputs: list, outputs: list, dim=None) -> None:
        """A forward launch whose adjoint is recorded separately (``add_adjoint_only``)."""
        self.fwd.append(launch_cmd(kernel, self.dim if dim is None else dim, inputs, outputs, self.device))

    def add_adjoint_only(self, cmd) -> None:
        """A command of the backward pass only (runs, after reversal, before the adjoints recorded so far
        for the current substep)."""
        if self.grad:
            self.adj.append(cmd)
