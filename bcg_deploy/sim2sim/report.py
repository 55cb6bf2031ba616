"""The sim2sim report: settings + per-run and aggregate metrics, as JSON, a rich table and a plot.

The JSON holds no wall-clock figures, so the same seed and settings give a byte-identical file.
Aggregates are mean and population standard deviation (ddof 0) over runs of the finite values.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.sim2sim import metrics

METRICS = (
    ("e_track_cm", "E_track cm", "{:.2f}"),
    ("joint_rmse_rad", "joint RMSE rad", "{:.3f}"),
    ("root_pos_err_cm", "root err cm", "{:.2f}"),
    ("foot_penetration_mm", "foot pen. mm", "{:.2f}"),
    ("torque_saturation", "torque sat.", "{:.3f}"),
)
REPORT_VERSION = 1
FELL_EXIT = 3
"""Exit code of ``bcgd sim2sim --fail-on-fall`` when any run fell (0 when none did; 2 is bad input)."""


@dataclass
class Report:
    """``settings`` (what was run), ``runs`` (RunResult per seeded run), ``aggregate`` (mean/std, falls).
    ``extras`` holds run-to-run varying facts (wall time, video file) that stay out of the JSON."""

    settings: dict
    runs: list  # list[RunResult]
    aggregate: dict
    extras: dict = field(default_factory=dict)

    @classmethod
    def build(cls, settings: dict, runs: list) -> Report:
        agg = {"runs": len(runs), "falls": int(sum(r.fell for r in runs))}
        falls_t = [r.fall_time_s for r in runs if r.fell]
        agg["mean_fall_time_s"] = float(np.mean(falls_t)) if falls_t else None
        for key, _, _ in METRICS:
            mean, std = metrics.mean_std([getattr(r, key) for r in runs])
            agg[key] = {"mean": mean, "std": std}
        return cls(settings, runs, agg)

    def fall_starts(self) -> str | None:
        """One line naming how each run that fell started (roll, pitch, yaw of its perturbed start, rad),
        or None when none or every run fell (the starts then tell nothing apart) or they were not perturbed."""
        fell = [r for r in self.runs if r.fell and r.initial_perturbation]
        if not fell or len(fell) == len(self.runs):
            return None
        starts = ", ".join(
            f"{r.index} ({', '.join(f'{a:+.2f}' for a in r.initial_perturbation['root_roll_pitch_yaw_rad'])})"
            for r in fell
        )
        return f"the runs that fell started rolled, pitched, yawed (rad): {starts}"

    def to_dict(self) -> dict:
        return _finite(
            {
                "report_version": REPORT_VERSION,
                "settings": self.settings,
                "aggregate": self.aggregate,
                "runs": [r.to_dict() for r in self.runs],
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"

    def write_json(self, path: str | Path, overwrite: bool = True, flag: str = "--overwrite") -> Path:
        """The JSON report, written atomically (see ``fileio``; ``overwrite=False``: only where no file is)."""
        return atomic_write_bytes(path, self.to_json().encode(), "--json", overwrite, flag)

    @property
    def any_fell(self) -> bool:
        """Whether a run fell (``bcgd sim2sim --fail-on-fall`` then exits with ``FELL_EXIT``)."""
        return self.aggregate["falls"] > 0

    def table(self):
        """A rich Table: one row per run, then the mean (with the fall count) and the std over runs."""
        from rich.table import Table

        s = self.settings
        title = f"sim2sim {s['mode']}: {s['reference']['source']}, physics {1 / s['physics_dt']:.0f} Hz"
        t = Table("run", "fell", "fall s", *(label for _, label, _ in METRICS), title=title)
        for r in self.runs:
            cells = [_fmt(fmt, getattr(r, key)) for key, _, fmt in METRICS]
            fall = f"{r.fall_time_s:.2f}" if r.fell else "-"
            t.add_row(str(r.index), "[red]yes[/]" if r.fell else "no", fall, *cells)
        a = self.aggregate
        mft = a["mean_fall_time_s"]
        mean = [_fmt(fmt, a[key]["mean"]) for key, _, fmt in METRICS]
        std = [_fmt(fmt, a[key]["std"]) for key, _, fmt in METRICS]
        t.add_row("mean", f"{a['falls']}/{a['runs']}", "-" if mft is None else f"{mft:.2f}", *mean, style="bold")
        t.add_row("std", "", "", *std)
        return t

    def speed_text(self) -> str:
        """One line: the MuJoCo settings, and how fast the runs went (real-time factor overall and per process)."""
        m, x, dt = self.settings["mujoco"], self.extras, self.settings["physics_dt"]
        video = ", video rendering included" if x.get("video") else ""
        return (
            f"MuJoCo {m['version']} {m['integrator']}/{m['solver']}/{m['cone']}, physics {dt * 1e3:g} ms, "
            f"control {self.settings['control_dt'] * 1e3:g} ms; {x['sim_s']:.1f} s simulated in "
            f"{x['elapsed_s']:.1f} s ({speed(x['sim_s'], x['elapsed_s'])} real time; "
            f"{speed(x['sim_s'], x['wall_s'])} per process{video})"
        )

    def stack_text(self) -> str | None:
        """One line naming the stack that replayed the policy and which of its runtime behaviours are modelled
        (None when no stack runtime replayed it)."""
        stack = self.settings.get("stack")
        if not stack or "behaviours" not in stack:
            return None
        rows = stack["behaviours"]
        skipped = [r["name"] for r in rows if not r["modelled"].startswith("yes")]
        not_modelled = f"; not: {'; '.join(skipped)}" if skipped else ""
        return (
            f"stack {stack['name']} ({stack['repo']}; {stack['chosen']}): {len(rows) - len(skipped)} of {len(rows)} "
            f"runtime behaviours modelled{not_modelled} (--json: settings.stack)"
        )

    def plot(self, path: str | Path, overwrite: bool = True, flag: str = "--overwrite") -> Path:
        """PNG: mean body position error (cm) and joint RMS error over time, one line per run (written as
        ``write_json``)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        for r in self.runs:
            s = r.series
            if not len(s.get("t", [])):
                continue
            (line,) = ax1.plot(s["t"], s["body_err_cm"], lw=1, label=f"run {r.index}")
            ax2.plot(s["t"], s["joint_err_rad"], lw=1, color=line.get_color())
            if r.fell:
                ax1.axvline(r.fall_time_s, color=line.get_color(), ls=":", lw=1)
        ax1.set_ylabel("body position error (cm)")
        ax2.set_ylabel("joint RMS error (rad)")
        ax2.set_xlabel("time (s)")
        ax1.set_title(f"sim2sim {self.settings['mode']}: {self.settings['reference']['source']} (dotted: fall)")
        ax1.legend(fontsize=8, loc="upper left")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
        fig.tight_layout()
        png = io.BytesIO()
        try:
            fig.savefig(png, format="png", dpi=110)
        finally:
            plt.close(fig)
        return atomic_write_bytes(path, png.getvalue(), "--plot", overwrite, flag)


def speed(sim_s: float, wall_s: float) -> str:
    """The real-time factor, to two significant figures (``0.2x``, ``3.4x``, ``27x``, ``150x``)."""
    if wall_s <= 0:
        return "-"
    rtf = sim_s / wall_s
    if rtf >= 100:
        return f"{rtf:.0f}x"
    return f"{float(f'{rtf:.2g}'):g}x"


def _fmt(fmt: str, v) -> str:
    return "nan" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _finite(x):
    """JSON-safe copy: NaN/inf -> None, numpy scalars/arrays -> Python."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x
