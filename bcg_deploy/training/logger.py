"""Per-iteration metrics: one JSON line per iteration (metrics.jsonl) and TensorBoard scalars.

The console (rich) belongs to the CLI, which receives the same metric dicts through the runner's
``on_iteration`` callback. TensorBoard is optional: if it cannot be imported the JSONL still works.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError


def _plain(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/Inf; keep the information as a string
    return v


class MetricsLogger:
    """Writes ``metrics.jsonl`` (appending, flushed every line) and TensorBoard event files in ``run_dir``."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_iteration: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if resume_iteration is not None:
            self._truncate_after(resume_iteration)
        elif self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                purge = None if resume_iteration is None else resume_iteration + 1
                self._tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=purge)
            except Exception:  # noqa: BLE001 - optional backend
                self._tb = None

    def _truncate_after(self, iteration: int) -> None:
        """Keep only lines with ``iteration`` <= the resumed one (the rest will be recomputed)."""
        if not self.path.exists():
            return
        keep = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("iteration", -1) <= iteration:
                    keep.append(line)
            except json.JSONDecodeError:
                continue
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
        os.replace(tmp, self.path)

    def log(self, metrics: dict) -> None:
        it = int(metrics["iteration"])
        with _stop_on_write_error(self.path):
            self._file.write(json.dumps({k: _plain(v) for k, v in metrics.items()}) + "\n")
            self._file.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                if k != "iteration" and isinstance(v, (int, float)) and math.isfinite(float(v)):
                    self._tb.add_scalar(k, float(v), it)

    def event(self, iteration: int, kind: str, message: str) -> None:
        """A one-off event (NaN reset, skipped update, refused checkpoint) in events.jsonl."""
        path = self.run_dir / "events.jsonl"
        with _stop_on_write_error(path), open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"iteration": iteration, "event": kind, "message": message}) + "\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a failed flush was reported by log() already
            self._file.close()
        if self._tb is not None:
            self._tb.close()


@contextlib.contextmanager
def _stop_on_write_error(path: Path) -> Iterator[None]:
    """A write error (disk full, file too large) of a log file: one line naming the file, and the run stops."""
    try:
        yield
    except OSError as exc:
        raise BcgdError(f"cannot write {path}: {exc.strerror or exc}") from None


def episode_metrics(stats: dict, episode_len, episode_return) -> dict:  # noqa: ANN001 - sized iterables
    """A rollout's episode figures: mean length / return over the recent episodes (``episode_len``,
    ``episode_return``: the last ones ended, control steps and summed reward), and the rollout's counts
    (``stats``: ``fell``, ``strayed``, ``timeout``, ``diverged``, and ``episodes_done`` or else the
    ``episode_len`` list of the rollout's finished episodes)."""
    return {
        "episode_length": float(np.mean(episode_len)) if len(episode_len) else math.nan,
        "episode_return": float(np.mean(episode_return)) if len(episode_return) else math.nan,
        "episodes_done": stats["episodes_done"] if "episodes_done" in stats else len(stats["episode_len"]),
        "falls": stats["fell"],
        "strayed": stats["strayed"],
        "timeouts": stats["timeout"],
        "diverged": stats["diverged"],
    }


def read_metrics(run_dir: Path) -> list[dict]:
    """All lines of a run's metrics.jsonl."""
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CURVES = (
    ("reward", "reward / step"),
    ("tracking_error_cm", "tracking error (cm)"),
    ("episode_length", "episode length (steps)"),
    ("actor_grad_norm", "actor grad norm (before clipping)"),
)


def plot_learning_curve(run_dir: Path, out_name: str = "learning_curve.png") -> Path | None:
    """Plot the main metrics of metrics.jsonl against the iteration into ``run_dir/out_name``."""
    rows = read_metrics(run_dir) if (Path(run_dir) / "metrics.jsonl").exists() else []
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3.2))
    its = [r["iteration"] for r in rows]
    for ax, (key, label) in zip(axes, CURVES, strict=True):
        ys = [float(r[key]) if isinstance(r.get(key), (int, float)) else math.nan for r in rows]
        ax.plot(its, ys, lw=1.2)
        if key == "actor_grad_norm" and any(y > 0 for y in ys if y == y):
            ax.set_yscale("log")  # pre-clip norms: rare stiff-contact spikes span many decades
        ax.set_xlabel("iteration")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(run_dir) / out_name
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)
    return out
