"""The joint-spike filter for retargeted clips.

The LAFAN1 G1 retargeting has frames where a joint jumps by more than 0.5 rad between two
consecutive 30 fps frames (mostly shoulders and wrists when the arm solution switches branch, and
some ankle-roll flips), while the neighbouring frames move slowly. Such a step becomes a one-frame
spike in the joint velocity (15+ rad/s) that no controller should imitate.

Filter (per joint, at the source rate): an interval (i, i+1) is a *spike* when
``|dq| > max_step`` (rad per frame), or when ``|dq| > rel_min_step`` and ``|dq|`` exceeds
``rel_factor`` times the largest of the two intervals on each side. The frames around a spike,
``i - w + 1 .. i + w``, are replaced by the cubic Hermite curve between the anchor frames
``i - w`` and ``i + w + 1`` with the anchors' central-difference slopes, so a smooth motion passes
almost unchanged and a step is spread over ``2w + 1`` intervals. ``w`` starts at ``half_width`` and
grows (up to ``max_half_width``) until the bridged segment has no spike left. Root position and
orientation are not filtered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpikeFilterCfg:
    """Parameters of :func:`despike` (rad per source frame, frames)."""

    enabled: bool = True
    max_step: float = 0.5
    rel_min_step: float = 0.25
    rel_factor: float = 4.0
    half_width: int = 2
    max_half_width: int = 6


def _spikes(x: np.ndarray, cfg: SpikeFilterCfg) -> np.ndarray:
    """Indices i of spike intervals (i, i+1) of a 1-D track."""
    d = np.abs(np.diff(x))
    n = len(d)
    if n == 0:
        return np.zeros(0, dtype=int)
    pad = np.concatenate([np.zeros(2), d, np.zeros(2)])
    neigh = np.max(np.stack([pad[0:n], pad[1 : n + 1], pad[3 : n + 3], pad[4 : n + 4]]), axis=0)
    spike = (d > cfg.max_step) | ((d > cfg.rel_min_step) & (d > cfg.rel_factor * neigh))
    return np.flatnonzero(spike)


def _slope(x: np.ndarray, i: int) -> float:
    if 0 < i < len(x) - 1:
        return 0.5 * (x[i + 1] - x[i - 1])
    return 0.0


def _bridge(x: np.ndarray, a: int, b: int, ma: float, mb: float) -> None:
    """Overwrite x[a+1:b] with the cubic Hermite from (x[a], slope ma) to (x[b], slope mb) (per frame)."""
    n = b - a
    s = np.arange(1, n) / n
    h00 = 2 * s**3 - 3 * s**2 + 1
    h10 = s**3 - 2 * s**2 + s
    h01 = -2 * s**3 + 3 * s**2
    h11 = s**3 - s**2
    x[a + 1 : b] = h00 * x[a] + h10 * n * ma + h01 * x[b] + h11 * n * mb


def _spikes_in(x: np.ndarray, a: int, b: int, cfg: SpikeFilterCfg) -> np.ndarray:
    """Spike intervals of ``x`` that lie in [a, b], judged with two frames of context on each side."""
    lo = max(a - 2, 0)
    idx = _spikes(x[lo : b + 3], cfg) + lo
    return idx[(idx >= a) & (idx < b)]


def despike_track(x: np.ndarray, cfg: SpikeFilterCfg) -> tuple[np.ndarray, int]:
    """Filtered copy of a 1-D joint track and the number of spike intervals found in the input."""
    x = np.array(x, dtype=np.float64)
    found = _spikes(x, cfg)
    if not cfg.enabled or len(found) == 0:
        return x, int(len(found))
    n = len(x)
    done: set[int] = set()
    while True:
        todo = [int(i) for i in _spikes(x, cfg) if int(i) not in done]
        if not todo:
            break
        i = todo[0]
        done.add(i)
        for w in range(cfg.half_width, cfg.max_half_width + 1):
            a, b = max(i - w, 0), min(i + w + 1, n - 1)
            orig = x[a : b + 1].copy()
            _bridge(x, a, b, _slope(x, a), _slope(x, b))
            if len(_spikes_in(x, a, b, cfg)) == 0 or w == cfg.max_half_width:
                break
            x[a : b + 1] = orig
    return x, int(len(found))


def despike(joint_pos: np.ndarray, cfg: SpikeFilterCfg | None = None) -> tuple[np.ndarray, int]:
    """Apply :func:`despike_track` to every column of ``joint_pos`` [N, J]; returns (filtered, spikes)."""
    cfg = cfg or SpikeFilterCfg()
    out = np.empty_like(joint_pos, dtype=np.float64)
    total = 0
    for j in range(joint_pos.shape[1]):
        out[:, j], k = despike_track(joint_pos[:, j], cfg)
        total += k
    return out, total
