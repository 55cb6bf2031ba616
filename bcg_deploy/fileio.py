"""Files in and out: atomic writes (nothing is left half-written: a temporary file in the same folder, then
``os.replace``), and input files read with one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from bcg_deploy.errors import BcgdError


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path`` (parent folders created), flush it to disk, then
    rename it over ``path``; a one-line BcgdError naming ``path`` on failure."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a fresh name opened exclusively: open() gives it the umask's permissions (mkstemp would give 0600)
        name = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with open(name, "xb") as fh:
            tmp = name  # ours from here on: removed on failure
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise BcgdError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def atomic_write_json(path: str | Path, obj) -> Path:
    """``obj`` as indented JSON, written atomically."""
    return atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def check_writable(path: Path, what: str, is_dir: bool = False) -> Path:
    """Create ``path``'s folder (or ``path`` itself when ``is_dir``) and prove a file can be written there.

    A one-line BcgdError ``cannot write <what> <path>: <reason>`` otherwise. Called before a long
    simulation or training, so that a bad output path costs nothing.
    """
    path = Path(path)
    folder = path if is_dir else path.parent
    if not is_dir and path.is_dir():
        raise BcgdError(f"cannot write {what} {path}: it is a folder (expected a file name)")
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise BcgdError(f"cannot write {what} {path}: {parent} is a file, not a folder")
            break
    probe = folder / f".bcgd-write-test.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise BcgdError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    return path


def read_input(path: str | Path, expected: str = "a file") -> bytes:
    """The bytes of an input file, or a one-line BcgdError: no such file, a directory (``expected`` says what
    was wanted, e.g. "a CSV file"), or unreadable."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise BcgdError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BcgdError(f"{path}: is a directory, expected {expected}") from None
    except OSError as exc:
        raise BcgdError(f"{path}: cannot read ({exc.strerror})") from None


def file_sha256(path: str | Path, expected: str = "a file") -> str:
    """sha256 (hex) of an input file's bytes (errors as ``read_input``)."""
    return hashlib.sha256(read_input(path, expected)).hexdigest()
