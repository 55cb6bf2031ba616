"""A policy changed after its export is refused (``bcg_deploy.integrity``): ``bcgd export`` records the
content hash; ``bcgd sim2sim`` and ``bcgd inspect`` recompute it and refuse a file that does not match with
one line, whatever changed (weights zeroed mid-file, one metadata gain edited). An ONNX without the hash
(another project's) is not refused for that: it gets a note."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest

from bcg_deploy.errors import BcgdError
from tests.cli.util import assert_one_line_error, bcgd_here
from tests.sim2sim.test_bad_inputs import full_metadata, tiny_graph


def _zero_middle(src, dst, n: int = 4096):
    """The issue's damage: 4 KB of zeros in the middle of the file."""
    data = bytearray(src.read_bytes())
    mid = len(data) // 2
    data[mid : mid + n] = bytes(n)
    dst.write_bytes(bytes(data))
    return dst


def test_an_export_records_a_hash_that_matches(raw_export, deploy_exports):
    from bcg_deploy.integrity import HASH_KEY, check_integrity, content_hash, recorded_hash

    for res in (raw_export, *deploy_exports.values()):
        model = onnx.load(str(res.path))
        stored = json.loads({p.key: p.value for p in model.metadata_props}[HASH_KEY])  # JSON, as every bcgd.* key
        assert stored == recorded_hash(model) == content_hash(model) == json.loads(res.metadata[HASH_KEY])
        assert check_integrity(res.path) is None


def test_a_policy_zeroed_mid_file_is_refused(raw_export, tmp_path, capsys):
    bad = _zero_middle(raw_export.path, tmp_path / "bad.onnx")
    onnx.load(str(bad))  # still a loadable ONNX: only the content check notices
    assert_one_line_error(bcgd_here("sim2sim", bad, "--runs", "1", capsys=capsys), "was changed after bcgd export")
    assert_one_line_error(bcgd_here("inspect", bad, capsys=capsys), "was changed after bcgd export")
    from bcg_deploy.integrity import check_integrity

    with pytest.raises(BcgdError, match="was changed after bcgd export"):
        check_integrity(bad)


def test_an_edited_metadata_gain_is_refused(deploy_exports, tmp_path, capsys):
    model = onnx.load(str(deploy_exports["beyondmimic"].path))
    for p in model.metadata_props:
        if p.key == "joint_stiffness":
            values = p.value.split(",")
            p.value = ",".join([str(float(values[0]) * 2), *values[1:]])
    edited = tmp_path / "edited.onnx"
    onnx.save(model, str(edited))
    assert_one_line_error(bcgd_here("sim2sim", edited, "--runs", "1", capsys=capsys), "was changed after bcgd export")


def test_a_policy_without_a_hash_gets_a_note_not_a_refusal(raw_export, tmp_path, capsys):
    from bcg_deploy.integrity import HASH_KEY, NO_HASH_NOTE, check_integrity

    model = onnx.load(str(raw_export.path))
    kept = [p for p in model.metadata_props if p.key != HASH_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    older = tmp_path / "older.onnx"
    onnx.save(model, str(older))
    assert check_integrity(older) == NO_HASH_NOTE
    proc = bcgd_here("sim2sim", older, "--runs", "1", "--max-seconds", "0.2", capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no bcgd content hash" in proc.stdout
    proc = bcgd_here("inspect", older, capsys=capsys)
    assert "integrity: no bcgd content hash (not a bcgd export" in proc.stdout
    foreign = tiny_graph(tmp_path / "foreign.onnx", metadata=full_metadata())
    assert check_integrity(foreign) == NO_HASH_NOTE


def test_a_copy_is_still_the_same_policy(raw_export, tmp_path):
    """The hash is of the content, not of the file: a copy, or a model loaded and saved again unchanged, passes."""
    from bcg_deploy.integrity import check_integrity

    copy = shutil.copy(raw_export.path, tmp_path / "copy.onnx")
    assert check_integrity(copy) is None
    resaved = tmp_path / "resaved.onnx"
    onnx.save(onnx.load(str(raw_export.path)), str(resaved))
    assert check_integrity(resaved) is None
