"""The same checkpoint exported twice gives the same ONNX, and the comparison of bench/export_identity.py
(used to check that a change of the source tree leaves exports alone) sees a changed weight or metadata key."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

from bcg_deploy.export import ExportConfig, export_policy
from tests.conftest import load_script
from tests.export.conftest import one_torch_thread

identity = load_script("bench/export_identity.py")


def test_an_export_is_repeatable_and_the_comparison_sees_changes(tmp_path, ckpt_dir, raw_export):
    again = tmp_path / "exported" / "policy.onnx"
    again.parent.mkdir()
    with one_torch_thread():
        export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=again))
    assert identity.compare(raw_export.path, again) == {"graph": [], "initializers": [], "metadata": []}

    def stamped(when: str) -> onnx.ModelProto:  # a field that records when: masked, never a difference
        model = onnx.load(str(again))
        robot = next(p for p in model.metadata_props if p.key == "bcgd.robot")
        robot.value = json.dumps({**json.loads(robot.value), "exported_at": when})
        return model

    onnx.save(stamped("monday"), str(tmp_path / "monday.onnx"))
    model = stamped("tuesday")
    weight = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    changed = numpy_helper.to_array(weight).copy()
    changed.flat[0] += 1e-3
    weight.CopyFrom(numpy_helper.from_array(changed, weight.name))
    key = next(p for p in model.metadata_props if p.key == "bcgd.training")
    key.value = json.dumps({**json.loads(key.value), "iterations": -1})
    onnx.save(model, str(tmp_path / "tuesday.onnx"))
    diff = identity.compare(tmp_path / "monday.onnx", tmp_path / "tuesday.onnx")
    assert diff == {"graph": [], "initializers": [weight.name], "metadata": ["bcgd.training"]}
