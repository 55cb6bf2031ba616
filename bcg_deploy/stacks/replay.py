"""A policy as its deploy stack runs it, for sim2sim: ``load_policy`` gives the runner its ``setup.policy``.

bcgd's raw-state exports stay :class:`~bcg_deploy.sim2sim.policy.OnnxPolicy` (no stack). Everything with an
``obs`` input, ours or anyone's, becomes a :class:`StackPolicy`: verified first (a mismatch refuses the run),
then driven by its stack's runtime (``<stack>.act(k, qpos, qvel)``: the stack's own observation, reset and
motion indexing, targets in the G1's joint order). The runner needs from it what it needs from an OnnxPolicy:
``meta`` (:class:`PolicyMetadata`, in the model's joint order), ``reference()``, ``sha256``, ``profile``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.motion import Motion
from bcg_deploy.profiles import PROFILES, raw_noise
from bcg_deploy.robots import RobotSpec
from bcg_deploy.sim2sim.policy import OnnxPolicy, PolicyMetadata
from bcg_deploy.stacks import holosoma, unitree, unitree_runtime
from bcg_deploy.stacks import motion_tracking_controller as mtc
from bcg_deploy.stacks.base import reference_of, session
from bcg_deploy.stacks.inspect import BCGD, INFOS, Inspection, detect, inspect

_STACK_PROFILE = {unitree.MJLAB: "unitree", unitree.LAB: "unitree", holosoma.NAME: "holosoma"}
"""Whose training noise a foreign policy gets: unitree_rl_mjlab's tracking_env_cfg.py:55-77 and holosoma's
config_values/wbt/g1/observation.py give the levels of the unitree profile (0.05 rad anchor, 0.2 rad/s, 0.01 rad,
0.5 rad/s; the holosoma profile where it is declared); motion_tracking_controller's are whole_body_tracking's
(the beyondmimic profiles, matched by term names)."""


def load_policy(path: str | Path, spec: RobotSpec, stack: str | None = None, force: bool = False,
                motion: str | Path | None = None):  # fmt: skip
    """OnnxPolicy for a bcgd raw-state export; ``--stack bcgd`` on a deploy export: :class:`ContractPolicy` (the
    clean contract, no stack's runtime); otherwise a verified :class:`StackPolicy`."""
    path = Path(path)
    found, _ = detect(path)
    if (stack or found) == BCGD:
        onnx_path = path / "exported" / "policy.onnx" if path.is_dir() else path
        policy = OnnxPolicy(onnx_path, spec, force=force)
        return policy if policy.profile is None else ContractPolicy(onnx_path, spec, force=force)
    return StackPolicy(path, spec, stack, force, motion)


class ContractPolicy(OnnxPolicy):
    """A bcgd deploy export replayed through the clean contract alone (``--stack bcgd``): the observation built
    by term name with the training maths (``sim2sim.obs_contract``), the reference frame k at step k, a zero
    last action at the start, target = default + scale * actions; none of any stack's runtime behaviours."""

    def controller(self, setup):  # noqa: ANN001, ANN201 - runner.Sim2SimSetup -> runner.Controller
        from bcg_deploy.sim2sim.obs_contract import ObsContract  # loads torch: only --stack bcgd needs it

        meta = self.meta
        contract = ObsContract(self.profile, setup.model, setup.reference, meta.joint_names, meta.body_names,
                               meta.default_joint_pos)  # fmt: skip
        last = np.zeros(len(meta.joint_names))

        def act(k: int, inputs: dict) -> np.ndarray:
            qpos = np.concatenate([inputs["base_pos"][0], inputs["base_quat"][0], inputs["joint_pos"][0]])
            qvel = np.concatenate([inputs["base_lin_vel"][0], inputs["base_ang_vel"][0], inputs["joint_vel"][0]])
            qpos, qvel = qpos.astype(np.float64), qvel.astype(np.float64)
            if k == 0:
                contract.reset(qpos)
                last[:] = 0.0
            last[:] = self.run_obs(contract.observation(k, qpos, qvel, last), k)
            return meta.default_joint_pos + meta.action_scale * last

        return act


def _profile_for(ins: Inspection):
    name = (ins.bcgd or {}).get("profile")
    if name in PROFILES:
        return PROFILES[name]
    if ins.stack == mtc.NAME:
        names = tuple(t for t, _, _ in ins.files.terms)
        return next((p for p in PROFILES.values() if p.deployable and p.term_names == names), None)
    return PROFILES.get(_STACK_PROFILE.get(ins.stack, ""), PROFILES["unitree"])


def _noise(ins: Inspection, profile) -> tuple[dict | None, str]:
    if ins.bcgd and isinstance(ins.bcgd.get("input_noise"), dict):
        return ins.bcgd["input_noise"], "metadata bcgd.input_noise"
    if profile is None:
        return None, "METHOD.md section 6 defaults"
    return raw_noise(profile), f"{ins.stack}'s training noise (the {profile.name} profile's levels) on the raw inputs"


class StackPolicy:
    """A policy read and run by its deploy stack (see the module docstring)."""

    def __init__(self, path: Path, spec: RobotSpec, stack: str | None, force: bool, motion) -> None:  # noqa: ANN001
        ins = inspect(path, stack, spec, motion)
        if not ins.ok:
            raise BcgdError(
                f"{path}: {ins.stack} would not run it as trained ({len(ins.findings.mismatches)} mismatch(es), "
                f"first: {ins.findings.mismatches[0]}); see `bcgd verify {path}`"
            )
        self.ins, self.stack, self.info, self.spec = ins, ins.stack, INFOS[ins.stack], spec
        self.path = ins.onnx.path
        self.sha256 = ins.onnx.sha256
        self.session = session(self.path)
        self.profile = _profile_for(ins)
        self.notes = [f"note from {self.stack}: {n}" for n in ins.findings.notes]
        self.integrity_note = None  # a bcgd export's content hash is checked by ``inspect`` (a note when none)
        self.meta = self._meta(force)
        self.model_edit, self.model_notes = None, []
        """For ``--mjcf``: the settings the stack's training code adds to its own G1 model (a Unitree-trained policy
        on unitree_rl_mjlab: mjlab's collision config; bcgd's exports keep the model as written)."""
        if self.stack == unitree.MJLAB and ins.bcgd is None:
            self.model_edit = self._mjlab_collision

    def _mjlab_collision(self, spec) -> None:  # noqa: ANN001 - mujoco.MjSpec
        applied = unitree.mjlab_full_collision(spec)
        if applied:
            self.model_notes.append(f"--mjcf model: {applied}")

    # --- what the runner reads
    def _meta(self, force: bool) -> PolicyMetadata:
        ins, spec, b = self.ins, self.spec, self.ins.bcgd or {}
        files = ins.files
        if isinstance(files, unitree.UnitreeFiles):
            kp, kd = files.kp, files.kd  # motor order = model order
            default = np.zeros(spec.num_joints)
            default[files.ids] = files.default
            scale = np.ones(spec.num_joints)
            scale[files.ids] = files.scale
            control_dt, frames = files.step_dt, files.joint_pos.shape[0]
        elif isinstance(files, mtc.MtcFiles):
            p = files.perm
            kp, kd, default, scale = files.kp[p], files.kd[p], files.default[p], files.scale[p]
            control_dt, frames = 0.02, files.num_frames
        else:
            p = files.perm
            kp, kd, default = files.kp[p], files.kd[p], files.default[p]
            scale = np.full(spec.num_joints, files.scale)
            control_dt, frames = 0.02, files.num_frames
        if not frames:
            raise BcgdError(f"{self.path}: cannot read the clip's length from the graph (no constant table)")
        robot = b.get("robot") if isinstance(b.get("robot"), dict) else {"name": spec.name, "model_hash": None}
        if robot.get("model_hash") not in (None, spec.model_hash) and not force:
            raise BcgdError(
                f"{self.path}: policy was trained on robot model {str(robot['model_hash'])[:12]}, the packaged "
                f"{spec.name} model is {spec.model_hash[:12]}; pass --force to run anyway"
            )
        noise, noise_src = _noise(ins, self.profile)
        vec = lambda k, d: np.asarray(b[k], np.float64) if isinstance(b.get(k), list) else d  # noqa: E731
        return PolicyMetadata(
            joint_names=spec.joint_names,
            body_names=spec.body_names,
            kp=np.asarray(kp, np.float64),
            kd=np.asarray(kd, np.float64),
            default_joint_pos=np.asarray(default, np.float64),
            action_scale=np.asarray(scale, np.float64),
            effort_limit=vec("effort_limit", np.asarray(spec.effort_limit, np.float64)),
            armature=vec("armature", np.asarray(spec.armature, np.float64)),
            control_dt=float(control_dt),
            physics_dt=b.get("physics_dt"),
            robot=robot,
            motion=b["motion"] if isinstance(b.get("motion"), dict) else {"name": self.path.stem, "num_frames": frames},
            num_frames=int(frames),
            input_noise=noise,
            domain_randomization=b.get("domain_randomization") or None,
            push=b.get("push") or None,
            obs_noise_scale=b["training"].get("obs_noise_scale") if isinstance(b.get("training"), dict) else None,
            exporter_version=b.get("exporter_version") or f"{self.info.repo} files",
            raw=dict(ins.onnx.metadata),
            input_noise_source=noise_src,
        )  # fmt: skip

    def reference(self) -> Motion:
        """The clip the stack plays, at the control rate, bodies by forward kinematics (``base.reference_of``)."""
        files, dt = self.ins.files, self.meta.control_dt
        if isinstance(files, unitree.UnitreeFiles):
            if files.stack == unitree.MJLAB and abs(dt - unitree.NPZ_DT) > 1e-9:
                raise BcgdError(f"{self.path}: sim2sim replays unitree_rl_mjlab at step_dt 0.02 s (its 50 Hz motion)")
            motion = unitree_runtime.root_motion(files, self.spec, dt)
        elif isinstance(files, mtc.MtcFiles):
            motion = mtc.root_motion(files, self.session, self.spec, dt)
        else:
            motion = holosoma.root_motion(files, self.session, self.spec, dt)
        return reference_of(motion, self.spec)

    def runtime(self, model):  # noqa: ANN001, ANN201 - mujoco.MjModel -> the stack's runtime
        files = self.ins.files
        if isinstance(files, unitree.UnitreeFiles):
            return unitree_runtime.UnitreeRuntime(files, self.session)
        if isinstance(files, mtc.MtcFiles):
            return mtc.MtcRuntime(files, self.session, model)
        return holosoma.HoloRuntime(files, self.session, self.spec)

    def controller(self, setup):  # noqa: ANN001, ANN201 - runner.Sim2SimSetup -> runner.Controller
        """A fresh runtime for one run: (k, raw inputs) -> joint targets, model order."""
        rt = self.runtime(setup.model)

        def act(k: int, inputs: dict) -> np.ndarray:
            qpos = np.concatenate([inputs["base_pos"][0], inputs["base_quat"][0], inputs["joint_pos"][0]])
            qvel = np.concatenate([inputs["base_lin_vel"][0], inputs["base_ang_vel"][0], inputs["joint_vel"][0]])
            return rt.act(k, qpos.astype(np.float64), qvel.astype(np.float64))

        return act

    def settings(self) -> dict:
        """For the report: the stack, how it was chosen, and which of its behaviours are modelled."""
        return {
            "name": self.stack,
            "repo": self.info.repo,
            "chosen": self.ins.detected,
            "files": [str(self.path)] + [str(p) for p in [getattr(self.ins.files, "motion_path", None)] if p],
            "behaviours": self.info.table(),
            "model": self.info.model,
        }  # fmt: skip
