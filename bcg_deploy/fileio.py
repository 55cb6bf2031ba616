"""Files in and out. Outputs: written whole or not at all, only over regular files, never over an earlier
output unasked; inputs (:func:`read_input`, :func:`file_sha256`): read with one-line errors.

Every file a command writes (checkpoint, ONNX, side files, JSON, plots, video) goes through
:func:`atomic_write_bytes` (or :func:`commit_file` for a file rendered elsewhere): the bytes go to a fresh
temporary file beside the target, are flushed to disk, then renamed onto the target (``os.replace``, atomic
on one file system), so a reader sees the old file or the new one, never a mixture; a failed write (disk
full, file too large, I/O error) removes the temporary file and leaves the target as it was.

What may stand at the target path (``os.lstat``, before anything is written and again just before the
rename):

- nothing: the file is created;
- a regular file: replaced, unless ``overwrite=False`` (then a one-line error that names the flag that
  allows it; the no-replace rename is ``os.link`` of the finished temporary file, which fails atomically
  when a file appeared meanwhile);
- a symbolic link: followed. The file it points to (or would point to) is the target, checked by the same
  rules, and the link itself is kept: a link ``policy.onnx -> runs/dance/policy.onnx`` keeps pointing at the
  new file. A link that points into a loop is an error;
- a folder, a device node, a FIFO or a socket: a one-line error. Renaming over one would replace a device
  node by a file (as root: a system device), or feed a FIFO's reader nothing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path

from bcg_deploy.errors import BcgdError

_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def kind_of(mode: int) -> str:
    """A file type in words (``os.stat_result.st_mode``)."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # not there (a parent that is a file is reported later)
        return None


def output_target(path: str | os.PathLike, what: str = "") -> Path:
    """The file that writing ``path`` replaces: ``path`` itself, or the end of its symbolic link(s).

    One-line BcgdError when that is a folder, a device node, a FIFO, a socket or a link loop.
    """
    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    st = _lstat(path)
    target = path
    if st is not None and stat.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(path))
        st = _lstat(target)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise BcgdError(f"cannot write {label}: a symbolic link that leads into a loop")
        label += f" (a symbolic link to {target})"
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BcgdError(f"cannot write {label}: it is {kind_of(st.st_mode)}, expected a regular file (or none)")
    return target


def check_output(
    path: str | os.PathLike, what: str = "", overwrite: bool = True, flag: str = "--force"
) -> tuple[Path, bool]:
    """Whether ``path`` may be written (see the module docstring): returns (target, exists).

    ``overwrite=False``: an existing file is a one-line error that names ``flag``.
    """
    target = output_target(path, what)
    exists = target.exists()
    if exists and not overwrite:
        label = f"{what} {path}" if what else str(path)
        raise BcgdError(f"{label} exists; give {flag} to overwrite it, or another file name")
    return target, exists


def commit_file(
    tmp: str | os.PathLike, path: str | os.PathLike, what: str = "", overwrite: bool = True, flag: str = "--force"
) -> Path:
    """Move the finished temporary file ``tmp`` (same folder as ``path``'s target) onto ``path``.

    The target is checked again (a special file or, with ``overwrite=False``, any file that appeared since
    the first check is refused); ``tmp`` is removed whatever happens. Returns the file written (the link's
    target when ``path`` is a symbolic link).
    """
    tmp, path = Path(tmp), Path(path)
    label = f"{what} {path}" if what else str(path)
    try:
        target, exists = check_output(path, what, overwrite, flag)
        if overwrite:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # fails with EEXIST when the target appeared: never replaces it
            except FileExistsError:
                raise BcgdError(f"{label} exists; give {flag} to overwrite it, or another file name") from None
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                os.replace(tmp, target)  # no hard links here: checked just above, as close as it gets
        _sync_folder(target.parent)
    except OSError as exc:
        raise BcgdError(f"cannot write {label}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return target


def temp_path(target: Path, suffix: str = ".tmp") -> Path:
    """A fresh hidden name beside ``target`` for its temporary file."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")


def atomic_write_bytes(
    path: str | os.PathLike, data: bytes | bytearray | memoryview, what: str = "", overwrite: bool = True,
    flag: str = "--force", parents: bool = True,
) -> Path:  # fmt: skip
    """Write ``data`` to ``path`` whole or not at all (see the module docstring); missing parent folders are
    created (``parents=False``: an error).

    Returns the file written (a symbolic link's target when ``path`` is one). Any failure is a one-line
    BcgdError ``cannot write <what> <path>: <cause>``; the temporary file is gone and the earlier file, if
    any, is untouched.
    """
    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    target, _ = check_output(path, what, overwrite, flag)
    tmp = None
    try:
        if parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        name = temp_path(target)
        # a fresh name opened exclusively: open() gives it the umask's permissions (mkstemp would give 0600)
        with open(name, "xb") as fh:
            tmp = name  # ours from here on: removed on failure
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise BcgdError(f"cannot write {label}: {exc.strerror or exc}") from None
    return commit_file(tmp, path, what, overwrite, flag)


def atomic_write_json(path: str | Path, obj, overwrite: bool = True) -> Path:
    """``obj`` as indented JSON, written atomically."""
    return atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode(), overwrite=overwrite)


def _sync_folder(folder: Path) -> None:
    """Flush the rename to disk (best effort: some file systems cannot open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_writable(path: Path, what: str, is_dir: bool = False, overwrite: bool = True, flag: str = "--force") -> Path:
    """Create ``path``'s folder (or ``path`` itself when ``is_dir``) and prove a file can be written there.

    A one-line BcgdError ``cannot write <what> <path>: <reason>`` otherwise (a folder, device node, FIFO or
    socket where a file goes; with ``overwrite=False``, an existing file). Called before a long simulation
    or training, so that a bad output path costs nothing.
    """
    path = Path(path)
    folder = path if is_dir else path.parent
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise BcgdError(f"cannot write {what} {path}: {parent} is a file, not a folder")
            break
    if not is_dir:
        if path.is_dir() and not path.is_symlink():
            raise BcgdError(f"cannot write {what} {path}: it is a folder (expected a file name)")
        folder = check_output(path, what, overwrite, flag)[0].parent
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
