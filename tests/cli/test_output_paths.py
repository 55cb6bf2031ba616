"""What the commands do with what stands at an output path (issue 48): a FIFO, a device node, a folder or a
link to one is refused with one line and left as it was; an existing output is kept unless --force
(export) or --overwrite (sim2sim) is given; a link to a regular file is followed and kept; standard output
that cannot take the JSON (/dev/full: a real ENOSPC) is one line, not a traceback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.cli.util import assert_one_line_error, bcgd_here


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_export_refuses_a_fifo_and_keeps_an_existing_policy(policy_onnx, tmp_path, capsys):
    run_pt = policy_onnx.parent / "run.pt"
    fifo = _fifo(tmp_path / "p.onnx")
    assert_one_line_error(bcgd_here("export", run_pt, "-o", fifo, capsys=capsys), "it is a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "l.onnx"
    link.symlink_to(fifo)
    assert_one_line_error(bcgd_here("export", run_pt, "-o", link, capsys=capsys), "a symbolic link to")
    assert link.is_symlink()

    existing = tmp_path / "policy.onnx"
    existing.write_bytes(b"an earlier policy")
    assert_one_line_error(
        bcgd_here("export", run_pt, "-o", existing, capsys=capsys), "exists; give --force to overwrite it"
    )
    assert existing.read_bytes() == b"an earlier policy"
    report = tmp_path / "export.json"
    report.write_text("{}")
    fresh = tmp_path / "fresh.onnx"
    assert_one_line_error(bcgd_here("export", run_pt, "-o", fresh, "--json", report, capsys=capsys), "--json")
    assert not fresh.exists()


def test_export_force_replaces_through_a_link_and_keeps_the_link(policy_onnx, tmp_path, capsys):
    run_pt = policy_onnx.parent / "run.pt"
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "policy.onnx"
    target.write_bytes(b"an earlier policy")
    link = tmp_path / "policy.onnx"
    link.symlink_to(target)
    proc = bcgd_here("export", run_pt, "-o", link, "--force", "--parity-samples", "64", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes()[:2] != b"an" and target.stat().st_size > 100_000


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_sim2sim_refuses_special_files_and_keeps_existing_reports(policy_onnx, tmp_path, option, capsys):
    fifo = _fifo(tmp_path / "out")
    assert_one_line_error(
        bcgd_here("sim2sim", policy_onnx, option, fifo, capsys=capsys), f"cannot write {option} {fifo}: it is a FIFO"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    folder = tmp_path / "folder"
    folder.mkdir()
    assert_one_line_error(bcgd_here("sim2sim", policy_onnx, option, folder, capsys=capsys), "it is a folder")
    existing = tmp_path / "earlier"
    existing.write_bytes(b"earlier")
    proc = bcgd_here("sim2sim", policy_onnx, option, existing, "--runs", "1", capsys=capsys)
    assert_one_line_error(proc, "exists; give --overwrite to overwrite it")
    assert existing.read_bytes() == b"earlier"
    try:  # a device node like /dev/null (1, 3), made here: the issue saw a system one replaced, as root
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return
    before = os.lstat(tmp_path / "null")
    assert_one_line_error(
        bcgd_here("sim2sim", policy_onnx, option, tmp_path / "null", capsys=capsys), "it is a character device"
    )
    after = os.lstat(tmp_path / "null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_sim2sim_overwrite_replaces_an_existing_report(policy_onnx, tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_text("earlier")
    proc = bcgd_here("sim2sim", policy_onnx, "--runs", "1", "--max-seconds", "0.2", "--json", report, "--overwrite",
                     capsys=capsys)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report.read_text().startswith("{")


def test_sim2sim_video_keeps_an_existing_file(policy_onnx, tmp_path, capsys):
    video = tmp_path / "run.mp4"
    video.write_bytes(b"earlier")
    assert_one_line_error(
        bcgd_here("sim2sim", policy_onnx, "--video", video, capsys=capsys), "exists; give --overwrite"
    )
    assert video.read_bytes() == b"earlier"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_json_to_a_full_standard_output_is_one_line(tmp_path):
    """``--json -`` into /dev/full: every write fails with ENOSPC."""
    import subprocess
    import sys

    from tests.cli.util import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "bcg_deploy.cli", "robot", "info", "--json", "-"], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip() == "error: cannot write to standard output: No space left on device"
