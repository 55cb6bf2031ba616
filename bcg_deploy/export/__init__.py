"""Export: ``run.pt`` -> one self-contained, verified, self-describing ``policy.onnx``.

Library: ``export_policy(ExportConfig(checkpoint, output, inputs=None|"raw"|"obs", profile=None|NAME))
-> ExportResult`` and ``inspect_policy(path, checkpoint=None) -> dict``.
CLI: ``bcgd export run.pt -o policy.onnx [--profile paper|beyondmimic|beyondmimic_wose|unitree|holosoma]
[--inputs obs]`` and ``bcgd inspect policy.onnx [--checkpoint run.pt] [--json]``.

Profiles (``bcg_deploy.profiles``; default: the one the checkpoint's actor was trained on; a profile
whose terms the actor was not trained on is a one-line error):
- ``paper``: the contract below (bcgd's own raw-state signature; sim2sim's default input).
- ``beyondmimic``, ``beyondmimic_wose``, ``unitree``: what BeyondMimic's motion_tracking_controller and
  the Mimic states of unitree_rl_mjlab and unitree_rl_lab bind (static ``obs`` signature, opset 11, their
  metadata, the unitree side files: deploy.yaml, motion NPZ, motion CSV and FSM entry); see
  ``export/deploy.py`` and ``export/unitree_rl_lab.py``.
- ``holosoma``: what holosoma's whole-body-tracking inference binds (``obs`` + ``time_step`` -> ``actions``,
  ``joint_pos``, ``joint_vel``, ``ref_pos_xyz``, ``ref_quat_xyzw``; JSON-only metadata with ``robot_urdf``,
  ``kp``, ``kd``, ``dof_names``); its default pose and action scale come from its own config, so the actor
  must have been trained with ``--obs holosoma``, which pins them; see ``export/holosoma.py``.

THE CONTRACT OF THE PAPER PROFILE (sim2sim and other consumers read only this)

Graph: ONNX opset 17, weights inside (no external data), dynamic batch dimension ``batch``, all
inputs and outputs float32. Inside: the reference clip as constants, the training
``ObservationModule`` (forward kinematics included; computed in float32 inside the graph, or in
float64 when float32 misses the parity tolerance), the folded observation normaliser
``clamp((obs - mean) / std, -clip, clip)``, the deterministic actor ``actions = tanh(mean)``, and
``joint_pos_target = clip(default_joint_pos + action_scale * actions, joint_lo, joint_hi)``. The raw
signature computes these as a small graph (``obs_graph``: root-relative kinematics as sums of
sinusoids plus pointer jumping, per-step reference tables, the state-independent reference entries and
the reference entries linear in the heading (normaliser clamp provably inactive) folded into the
actor's first-layer bias per time step), tested equal to the training modules in float64.

Inputs, default signature (``--inputs raw``), MuJoCo conventions:
    base_pos      [B, 3]   world, m                       (qpos[0:3])
    base_quat     [B, 4]   world, w x y z (normalised in-graph)  (qpos[3:7])
    base_lin_vel  [B, 3]   WORLD frame, m/s               (qvel[0:3], MuJoCo free joint)
    base_ang_vel  [B, 3]   BASE/BODY frame, rad/s         (qvel[3:6], MuJoCo free joint)
    joint_pos     [B, 29]  rad, RobotSpec.joint_names order (= metadata joint_names)
    joint_vel     [B, 29]  rad/s, same order
    time_step     [B, 1]   control step index t into the clip (float; truncated to an integer,
                           clamped to [0, T-1]); the observation shows frames t+1..t+3 (clamped)
Inputs, ``--inputs obs``: ``obs`` [B, 849] (the UN-normalised observation, layout bcgd.observation)
and ``time_step`` [B, 1].

Outputs (both signatures, in this order):
    actions           [B, 29]     in (-1, 1)
    joint_pos_target  [B, 29]     rad, the PD position target
    reference frame at time_step t (clamped):
    raw signature: ref_joint_pos, ref_joint_vel   obs signature: joint_pos, joint_vel   [B, 29]
    (an ONNX output cannot share an input's name, so the raw signature prefixes these two with ref_)
    body_pos_w [B, 30, 3] world m, body_quat_w [B, 30, 4] world w x y z, body_lin_vel_w [B, 30, 3]
    world m/s, body_ang_vel_w [B, 30, 3] world rad/s; bodies in metadata body_names order.

Metadata (``metadata_props``): the BeyondMimic/mjlab keys (values comma-separated, floats at full
``repr`` precision): joint_names, joint_stiffness (kp),
joint_damping (kd), default_joint_pos, action_scale, observation_names (term names),
observation_history_lengths (1 per term), command_names ("motion"), anchor_body_name ("pelvis": the
body every robot-relative term is anchored on), body_names, run_path (the checkpoint's path).
and the JSON-valued ``bcgd.*`` keys:
    bcgd.control_dt, bcgd.physics_dt, bcgd.substeps (s, s, int; the training simulator's)
    bcgd.effort_limit, bcgd.velocity_limit, bcgd.armature (lists in joint order)
    bcgd.quat_order ("wxyz"), bcgd.signature ("raw" | "obs"), bcgd.profile ("paper")
    bcgd.inputs / bcgd.outputs   [{name, shape, dtype, frame, units}]
    bcgd.observation   [{name, size, offset, noise, units, frame, future_steps, description}]
    bcgd.input_noise   raw-input U(-n, n) levels of the observation terms' noise (sim2sim's --noise 1;
                       training added bcgd.training.obs_noise_scale x these):
                       {base_pos: [nx, ny, nz] m, base_quat: n (rad, rotation-vector components),
                        base_lin_vel, base_ang_vel, joint_pos, joint_vel: scalars per component}
    bcgd.action        {offset, scale, clip: [-1, 1], joint_pos_target_clip: {lo, hi}, formula}
    bcgd.robot         {name, model_hash}
    bcgd.motion        {name, kind, file, sha256, ..., fps, num_frames}
    bcgd.training      {kappa, bundling (the bcg config), iterations, iterations_planned, num_envs,
                        seed, obs_noise_scale, physics_dt, substeps}
    bcgd.domain_randomization  {enabled, friction, base_mass_add_kg, link_mass_scale, com_offset_m,
                        kp_scale, kd_scale, armature_scale, joint_friction_scale, joint_offset_rad,
                        action_latency_steps ([lo, hi] each), reset_pos, reset_rot, reset_joint}
                        or {} when the config records none
    bcgd.push          {enabled, interval_s: [lo, hi], lin_vel: [x, y, z] m/s, ang_vel:
                        [roll, pitch, yaw] rad/s half-widths} or {}
    bcgd.exporter_version, bcgd.opset (17), bcgd.versions (torch, onnx, onnxruntime)
    bcgd.parity        {max_abs_err, max_rel_err (per output max|d| / max|torch|), per_output,
                        max_abs_err_vs_torch_float64, max_abs_err_vs_reference_module (raw signature:
                        the training ObservationModule -> normaliser -> actor in torch; recorded, not
                        a pass/fail criterion), num_inputs, sources, tolerance, signature}
    bcgd.content_sha256  SHA-256 of the model serialised without this key (``bcg_deploy.integrity``): sim2sim,
                       inspect and verify refuse a file whose content no longer matches it
Verification on every export: onnx.checker (full_check), then onnxruntime vs torch on >= 1000
inputs (clip frames, noisy states around them, states of a MuJoCo rollout of the torch policy);
an absolute error above 1e-5 on any output fails the export and nothing is written. An existing output
file is replaced only with ``ExportConfig.overwrite`` (``bcgd export --force``).
"""

from __future__ import annotations

from bcg_deploy.export.exporter import ExportConfig as ExportConfig
from bcg_deploy.export.exporter import ExportResult as ExportResult
from bcg_deploy.export.exporter import export_policy as export_policy
from bcg_deploy.export.inspection import inspect_policy as inspect_policy

__all__ = ["ExportConfig", "ExportResult", "export_policy", "inspect_policy"]
