"""Adaptive start phases: reset more envs shortly before the moments of the clip where episodes end.

With uniform reference-state initialisation every start is equally likely, so a clip with a few hard
moments ("walls": a jump's landing that ends every episode started before it, ``bench/failure_map.py``)
spends most of its env-steps on the easy stretches between them. BeyondMimic's adaptive sampling (its
paper, section III-F) weights the start bins by where episodes fail; this is our version of it:

- the clip's start frames ``0 .. F-2`` are cut into bins of ``bin_s`` seconds;
- every episode that ends by a fall or by straying counts one failure in the bin of the frame it ended in;
- once per iteration the counts, summed over every rank, enter an exponential average ``f`` (weight
  ``alpha``), so every rank holds the same ``f`` and draws from the same distribution;
- a bin's weight looks ahead: ``w_s = sum_{u=0}^{K-1} decay^u f_{s+u}`` (``K = kernel_bins``), so the bins
  before a wall, from which an episode has to cross it, are favoured, not the bin after the wall;
- the start distribution mixes ``w`` with the uniform one: ``p = uniform * len/n + (1 - uniform) * w/sum(w)``
  (uniform alone until a failure has been counted); a start is a bin drawn from ``p`` and a frame drawn
  uniformly within it.
"""

from __future__ import annotations

import math

import torch

from bcg_deploy.training.rng import Draw


def bin_edges(num_starts: int, bin_frames: int) -> torch.Tensor:
    """Start frame of each bin and one past the last start frame: [S + 1] (the last bin may be shorter)."""
    num_bins = max(math.ceil(num_starts / bin_frames), 1)
    edges = torch.arange(num_bins + 1, dtype=torch.long) * bin_frames
    edges[-1] = num_starts
    return edges


def start_probabilities(
    failures: torch.Tensor, lengths: torch.Tensor, kernel_bins: int, decay: float, uniform: float
) -> torch.Tensor:
    """P(bin) [S] from the averaged failures per bin [S] and the bins' lengths in frames [S] (see the module
    docstring): a failure weights its own bin and the ``kernel_bins - 1`` bins before it by ``decay**u``
    (``u`` bins before), and the result is mixed with the frame-uniform distribution in the ratio
    ``uniform``."""
    lengths = lengths.to(failures.dtype)
    flat = lengths / lengths.sum()
    w = torch.zeros_like(failures)
    for u in range(kernel_bins):  # w_s += decay^u f_{s+u}
        w[: failures.numel() - u] += decay**u * failures[u:]
    total = w.sum()
    if not bool(total > 0):
        return flat
    return uniform * flat + (1.0 - uniform) * w / total


class StartSampler:
    """The adaptive start distribution of one clip; see the module docstring. Counts are kept on the env's
    device (no host read while stepping); ``update`` is called once per iteration with every rank's sum."""

    def __init__(
        self,
        num_frames: int,
        control_dt: float,
        bin_s: float,
        kernel_bins: int,
        decay: float,
        uniform: float,
        alpha: float,
        device: torch.device,
    ) -> None:
        self.bin_frames = max(round(bin_s / control_dt), 1)
        self.edges = bin_edges(num_frames - 1, self.bin_frames)
        self.lengths = self.edges[1:] - self.edges[:-1]
        self.num_bins = self.lengths.numel()
        self.kernel_bins, self.decay, self.uniform, self.alpha = kernel_bins, decay, uniform, alpha
        self.failures = torch.zeros(self.num_bins, dtype=torch.float64)
        """The exponential average of the failures per bin and iteration, over every rank (host)."""
        self.pending = torch.zeros(self.num_bins, dtype=torch.float64, device=device)
        """This rank's failures per bin since the last ``take_counts`` (device)."""
        self._edges, self._lengths = self.edges.to(device), self.lengths.to(device)
        self._set_probabilities()

    def _set_probabilities(self) -> None:
        """P(bin) on the host, and its cumulative sum on the device for ``sample`` (a copy, no host read)."""
        self.probabilities = start_probabilities(
            self.failures, self.lengths, self.kernel_bins, self.decay, self.uniform
        )
        self._cdf = torch.cumsum(self.probabilities, 0).to(self.pending.device)

    def focus(self) -> float:
        """How many times more often than uniformly the favourite bin is drawn (1.0: uniform)."""
        return float((self.probabilities * self.lengths.sum() / self.lengths).max())

    def count(self, frame: torch.Tensor, failed: torch.Tensor) -> None:
        """Count the episodes that ended at ``frame`` [E] by a fall or a stray (``failed`` [E] bool)."""
        bins = torch.clamp(frame // self.bin_frames, max=self.num_bins - 1)  # frame F-1 ends the last bin
        self.pending = self.pending.index_add(0, bins, failed.to(self.pending.dtype))

    def take_counts(self) -> torch.Tensor:
        """This rank's failures per bin since the last call (on the device); resets them."""
        counts, self.pending = self.pending, torch.zeros_like(self.pending)
        return counts

    def update(self, counts: torch.Tensor) -> None:
        """Fold one iteration's failures per bin, summed over every rank, into the average."""
        counts = torch.as_tensor(counts, dtype=torch.float64).reshape(self.num_bins)
        self.failures = (1.0 - self.alpha) * self.failures + self.alpha * counts
        self._set_probabilities()

    def sample(self, draw: Draw) -> torch.Tensor:
        """Start frames [n] for the rows of ``draw``: a bin from the distribution, a frame uniform within it."""
        u = draw.rand(2)
        cdf = self._cdf
        bins = torch.searchsorted(cdf, u[:, 0].contiguous() * cdf[-1], right=True)
        bins = torch.clamp(bins, max=self.num_bins - 1)
        length = self._lengths[bins]
        offset = torch.minimum(torch.floor(u[:, 1] * length.to(u.dtype)).long(), length - 1)
        return self._edges[bins] + offset

    def state_dict(self) -> dict:
        return {"failures": self.failures.tolist()}

    def load_state_dict(self, d: dict) -> None:
        f = torch.as_tensor(d["failures"], dtype=torch.float64)
        if f.shape != self.failures.shape:
            raise ValueError(f"start sampler has {f.numel()} bins stored, this clip has {self.num_bins}")
        self.failures = f
        self._set_probabilities()
