"""Deploy-profile exports: parity for every profile, the graph holds no joint target and no clipping,
a profile the checkpoint's actor was not trained on is a one-line error."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.training.checkpoint import load_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer


@pytest.mark.parametrize("profile", ["beyondmimic", "beyondmimic_wose", "unitree"])
def test_parity_and_no_hidden_clip(deploy_exports, ckpt_dir, profile):
    res = deploy_exports[profile]
    assert res.parity["max_abs_err"] <= 1e-5 and res.parity["num_inputs"] >= 300
    model = onnx.load(str(res.path))
    clips = sorted(n.name for n in model.graph.node if n.op_type in ("Clip", "Min", "Max"))
    # the normaliser's clamp (part of the trained policy) and, with time_step, the clip-frame index clamp
    assert clips == (["/Clip", "/normalizer/Clip"] if profile != "unitree" else ["/normalizer/Clip"])
    assert model.opset_import[0].version == 11
    # actions far outside the normaliser's range still equal tanh(actor(clamp(norm(obs)))) in float64
    ck = load_checkpoint(ckpt_dir / f"run_{'beyondmimic_wose' if profile == 'unitree' else profile}.pt")
    actor = Actor.from_state_dict(ck["actor"]).double()
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]).double()
    obs = np.random.default_rng(0).normal(0, 3, (1, actor.obs_dim)).astype(np.float32)
    sess = ort.InferenceSession(str(res.path), providers=["CPUExecutionProvider"])
    feeds = {"obs": obs} | ({"time_step": np.zeros((1, 1), np.float32)} if len(sess.get_inputs()) == 2 else {})
    got = sess.run(["actions"], feeds)[0]
    with torch.no_grad():
        want = actor.deterministic(norm(torch.as_tensor(obs, dtype=torch.float64))).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_profile_the_actor_lacks_is_one_line_error(ckpt_dir, tmp_path):
    with pytest.raises(BcgdError) as e:
        export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=tmp_path / "p.onnx", profile="beyondmimic"))
    msg = str(e.value)
    assert "\n" not in msg and "trained on the paper observation, which lacks command" in msg
    with pytest.raises(BcgdError, match="lacks motion_anchor_pos_b, base_lin_vel"):
        export_policy(ExportConfig(checkpoint=ckpt_dir / "run_beyondmimic_wose.pt", output=tmp_path / "p.onnx",
                                   profile="beyondmimic"))  # fmt: skip
    with pytest.raises(BcgdError, match="export it with --profile beyondmimic"):
        export_policy(ExportConfig(checkpoint=ckpt_dir / "run_beyondmimic.pt", output=tmp_path / "p.onnx",
                                   profile="paper"))  # fmt: skip
    assert not list(tmp_path.iterdir())
