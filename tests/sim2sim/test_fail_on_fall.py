"""``bcgd sim2sim --fail-on-fall``: exit code 3 when any run fell, 0 when none did, so that a pipeline can
gate a deploy on it; without the option the exit code stays 0 (the report says what happened)."""

from __future__ import annotations

from tests.cli.util import bcgd_here

FELL_EXIT = 3


def test_fail_on_fall_exit_codes(untrained_onnx, capsys):
    args = ("sim2sim", untrained_onnx, "--runs", "2", "--max-seconds", "3")
    plain = bcgd_here(*args, capsys=capsys)
    assert plain.returncode == 0 and "2/2" in plain.stdout  # an untrained policy falls: reported, exit 0
    gated = bcgd_here(*args, "--fail-on-fall", capsys=capsys)
    assert gated.returncode == FELL_EXIT == 3
    assert gated.stderr.strip().splitlines()[-1] == "2 of 2 runs fell (--fail-on-fall): exit 3"
    held = bcgd_here("sim2sim", "--replay", "--motion", "dance", "--pin-base", "--runs", "1", "--max-seconds", "0.5",
                     "--fail-on-fall", capsys=capsys)  # fmt: skip
    assert held.returncode == 0, held.stderr  # nothing fell


def test_the_exit_code_is_in_the_help(capsys):
    from bcg_deploy.cli.sim2sim import FELL_EXIT as shown
    from bcg_deploy.sim2sim.report import FELL_EXIT as reported

    assert shown == reported == FELL_EXIT
    proc = bcgd_here("sim2sim", "--help", capsys=capsys)
    assert "--fail-on-fall" in proc.stdout and f"Exit with code {FELL_EXIT} when any run fell" in " ".join(
        proc.stdout.replace("│", " ").split()
    )
