"""Messages that say what a file is (issue 48): another project's ONNX given to sim2sim, a policy given to
export where its checkpoint goes, an MJCF that does not parse (the XML error with its line)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli.util import assert_one_line_error, bcgd_here


def _foreign(path):
    """A policy of another project: obs [1, 47] -> actions [1, 12], no bcgd metadata."""
    w = numpy_helper.from_array(np.ones((47, 12), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "W"], ["actions"])],
        "other",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 47])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 12])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.metadata_props.add(key="joint_names", value=",".join(f"j{i}" for i in range(12)))
    onnx.save(model, str(path))
    return path


def test_sim2sim_names_a_foreign_onnx_and_its_inputs(tmp_path, capsys):
    proc = bcgd_here("sim2sim", _foreign(tmp_path / "foreign.onnx"), "--runs", "1", capsys=capsys)
    line = assert_one_line_error(proc, "an ONNX model with no bcgd metadata, not written by bcgd export")
    assert "inputs obs [1, 47]; outputs actions [1, 12]" in line
    assert "849" not in line and "paper profile" not in line


def test_export_of_an_onnx_says_it_is_an_onnx_model(policy_onnx, tmp_path, capsys):
    proc = bcgd_here("export", policy_onnx, "-o", tmp_path / "again.onnx", capsys=capsys)
    line = assert_one_line_error(proc, f"{policy_onnx} is an ONNX model (inputs base_pos [batch, 3]")
    assert "not a checkpoint" in line and "Python objects" not in line
    assert not (tmp_path / "again.onnx").exists()


def test_mjcf_parse_error_gives_the_line_and_the_error(policy_onnx, tmp_path, capsys):
    garbage = tmp_path / "garbage.xml"
    garbage.write_text("<mujoco>\n<worldbody>\n<body>\n</wrong>\n</mujoco>\n")
    proc = bcgd_here("sim2sim", policy_onnx, "--runs", "1", "--mjcf", garbage, capsys=capsys)
    assert_one_line_error(proc, "not a loadable MJCF (XML error at line 3: XML_ERROR_MISMATCHED_ELEMENT")
    schema = tmp_path / "schema.xml"
    schema.write_text('<mujoco>\n<worldbody>\n<geom type="box" sizee="1 1 1"/>\n</worldbody>\n</mujoco>\n')
    proc = bcgd_here("sim2sim", policy_onnx, "--runs", "1", "--mjcf", schema, capsys=capsys)
    assert_one_line_error(proc, "unrecognized attribute: 'sizee' Element 'geom', line 3")
