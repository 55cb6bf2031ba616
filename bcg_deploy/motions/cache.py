"""A compact on-disk cache of processed clips (npz in ``library_dir()/cache``).

Only the generalized trajectory is stored (root pose, joints, their finite-difference velocities,
float64, compressed); body poses and velocities are recomputed by forward kinematics on load,
which is deterministic and takes a fraction of a second. Keys are sha256 digests of everything the
result depends on: the input file's sha256 (or the built-in generator name), the window, the output
rate, the processing options, the robot model hash and the code version (a digest of this
package's sources, so any code change invalidates old entries). Unreadable entries are ignored and
rewritten. Writes are atomic (temporary file in the same folder, then ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.paths import cache_dir

CACHE_FORMAT = 1
_FIELDS = ("root_pos", "root_quat", "joint_pos", "joint_vel", "root_lin_vel", "root_ang_vel")


@cache
def code_version() -> str:
    """Digest (12 hex) of the motions and rotations sources (the clip pipeline) and the cache format."""
    h = hashlib.sha256(f"format {CACHE_FORMAT}".encode())
    root = Path(__file__).resolve().parents[1]
    for p in sorted([*(root / "motions").rglob("*.py"), *(root / "rotations").rglob("*.py")]):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def cache_key(parts: dict) -> str:
    """Digest of the JSON of ``parts`` plus the code version."""
    blob = json.dumps({**parts, "code_version": code_version()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cache_path(key: str) -> Path:
    return cache_dir() / f"{key}.npz"


def load_track(key: str) -> tuple[Motion, dict] | None:
    """The cached (track, info) for ``key``, or None when absent or unreadable."""
    path = cache_path(key)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(str(z["info"]))
            arrays = {f: np.array(z[f], dtype=np.float64) for f in _FIELDS}
        return Motion(fps=float(info["fps"]), **arrays), info
    except Exception:  # a corrupt cache entry is recomputed, never fatal
        return None


def save_track(key: str, track: Motion, info: dict) -> Path | None:
    """Write ``track`` and ``info`` (JSON-serialisable) atomically; returns the path, None if unwritable."""
    path = cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                arrays = {name: getattr(track, name) for name in _FIELDS}
                np.savez_compressed(f, info=np.array(json.dumps({**info, "fps": track.fps})), **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return None
    return path
