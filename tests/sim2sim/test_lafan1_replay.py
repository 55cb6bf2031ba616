"""--replay --pin-base on a real LAFAN1 clip from ../shared (skips when absent): the harness baseline."""

from __future__ import annotations

import json

from tests.conftest import LAFAN1_DIR, require_shared
from tests.sim2sim.test_bad_inputs import run_cli


def test_pinned_replay_of_lafan1_run(tmp_path, capsys):
    csv = require_shared(LAFAN1_DIR / "run1_subject2.csv")
    out = tmp_path / "replay.json"
    args = ["sim2sim", "--replay", "--pin-base", "--motion", csv, "--start", "10", "--duration", "4"]
    code, err = run_cli([*args, "--runs", "1", "--json", out], capsys)
    assert code in (0, None), err
    r = json.loads(out.read_text())["runs"][0]
    assert not r["fell"] and r["steps"] == 200
    assert r["root_pos_err_cm"] < 1e-6  # the pelvis is pinned to the reference root
    # PD alone (targets = next reference frame, no feed-forward) lags the motion by a few cm only;
    # the untrained policy is off by tens of cm and the paper's trained policies by 13-34 cm.
    assert 0 < r["e_track_cm"] < 6.0 and 0 < r["joint_rmse_rad"] < 0.15
    assert r["foot_penetration_mm"] is None or r["foot_penetration_mm"] < 20
    free = tmp_path / "free.json"
    code, err = run_cli(["sim2sim", "--replay", "--motion", csv, "--start", "10", "--duration", "4", "--runs", "1",
                         "--json", free], capsys)  # fmt: skip
    assert code in (0, None), err
    f = json.loads(free.read_text())["runs"][0]
    assert f["root_pos_err_cm"] > r["root_pos_err_cm"]
