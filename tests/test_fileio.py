"""Output files (``bcg_deploy.fileio``): only regular files are replaced, a link is followed and kept, an
existing file is kept unless overwriting is asked for, and a write that fails (a real EFBIG from a file-size
limit) leaves the earlier file and no temporary file behind."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
from tests.conftest import run_under_size_limit


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


def _char_device(path: Path) -> Path:
    """A character device node like /dev/null (1, 3), made in the test folder (needs root)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


SPECIAL = {"fifo": (_fifo, "FIFO"), "socket": (_socket, "socket"), "char device": (_char_device, "character device")}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_special_file_is_refused_and_left_as_it_is(tmp_path, kind):
    make, words = SPECIAL[kind]
    path = make(tmp_path / "out.json")
    before = os.lstat(path)
    with pytest.raises(BcgdError, match=f"cannot write .*out.json: it is a {words}"):
        atomic_write_bytes(path, b"{}\n")
    after = os.lstat(path)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary file left


def test_a_link_to_a_special_file_is_refused(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    link = tmp_path / "out.json"
    link.symlink_to(fifo)
    with pytest.raises(BcgdError, match="a symbolic link to .*pipe.*it is a FIFO"):
        atomic_write_bytes(link, b"{}\n")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_a_folder_is_refused(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(BcgdError, match="it is a folder"):
        atomic_write_bytes(tmp_path / "out.json", b"{}\n")


def test_a_link_is_followed_and_kept(tmp_path):
    """A symbolic link stays a link: the file it points to gets the new content (replaced atomically)."""
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "policy.onnx"
    target.write_bytes(b"old")
    link = tmp_path / "policy.onnx"
    link.symlink_to(target)
    written = atomic_write_bytes(link, b"new")
    assert written == target and link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"new"
    dangling = tmp_path / "later.onnx"
    dangling.symlink_to(tmp_path / "runs" / "later.onnx")
    atomic_write_bytes(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "runs" / "later.onnx").read_bytes() == b"made"


def test_a_link_loop_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(BcgdError, match="loop"):
        atomic_write_bytes(a, b"x")


def test_an_existing_file_is_kept_without_overwrite(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(b"earlier")
    with pytest.raises(BcgdError, match="exists; give --overwrite to overwrite it"):
        atomic_write_bytes(path, b"later", overwrite=False, flag="--overwrite")
    assert path.read_bytes() == b"earlier"
    atomic_write_bytes(tmp_path / "new.json", b"fresh", overwrite=False)
    assert (tmp_path / "new.json").read_bytes() == b"fresh"
    atomic_write_bytes(path, b"later")  # overwrite=True (the default) replaces a regular file
    assert path.read_bytes() == b"later"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "report.json"]


def test_no_overwrite_holds_against_a_file_that_appears_during_the_write(tmp_path):
    """The final step of a no-overwrite write is atomic: a file created after the first check (here: between
    writing the temporary file and placing it) is not replaced."""
    from bcg_deploy.fileio import commit_file, temp_path

    path = tmp_path / "out.bin"
    tmp = temp_path(path)
    tmp.write_bytes(b"ours")
    path.write_bytes(b"theirs")  # appeared meanwhile
    with pytest.raises(BcgdError, match="exists"):
        commit_file(tmp, path, overwrite=False)
    assert path.read_bytes() == b"theirs" and not tmp.exists()


_EFBIG_CHILD = r"""
import sys
from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
try:
    atomic_write_bytes(sys.argv[1], b"x" * (4 * int(sys.argv[2])))
except BcgdError as exc:
    print(exc)
    sys.exit(2)
"""


def test_a_failed_write_keeps_the_earlier_file_and_leaves_no_temporary(tmp_path):
    """A real write error: the child's file-size limit (RLIMIT_FSIZE) makes write() fail with EFBIG."""
    path = tmp_path / "out.bin"
    path.write_bytes(b"earlier good content")
    proc = run_under_size_limit(["-c", _EFBIG_CHILD, str(path), "65536"], 65536)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.strip() == f"cannot write {path}: File too large", proc.stdout
    assert path.read_bytes() == b"earlier good content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
