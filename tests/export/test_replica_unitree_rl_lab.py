"""Replica of unitreerobotics/unitree_rl_lab's g1_29dof ``State_Mimic`` (4711dee) loading and driving the export of
a tiny ``bcgd train dance --obs unitree`` run: the policy folder, the motion CSV and the FSM entry of
``config/config.yaml``.

Paths under ``deploy/``. What the replica requires, and where the deploy requires it:

- ``include/param.h`` (read in unitree_rl_mjlab 5b7e396, the same deploy library): ``config/config.yaml`` of the
  project folder; ``parser_policy_dir`` resolves a relative ``policy_dir`` against the project folder and,
  when it has no ``exported/``, takes its last subfolder that has one;
- ``include/FSM/CtrlFSM.h`` (same): every state of ``FSM._`` has an ``id`` (int) and a ``type`` naming a
  registered ``State_<type>``; two states with one id end the program (``CtrlFSM::add``);
- ``robots/g1_29dof/src/State_Mimic.cpp:116-148``: ``FSM.<state>.policy_dir``, ``motion_file`` (relative to the
  project folder), ``fps`` (float), optional ``time_start`` / ``time_end`` clamped to [0, duration];
  ``<policy_dir>/params/deploy.yaml`` and ``<policy_dir>/exported/policy.onnx`` (the same ``ManagerBasedRLEnv``
  and ``OrtRunner`` as unitree_rl_mjlab's: ``StateMimicReplica`` of ``test_replica_unitree_rl_mjlab.py``);
  ``:150-156`` the time-out transition ``FSMStringMap.right.at("Velocity")`` throws without a Velocity state;
- ``State_Mimic.cpp:195-212`` (enter, policy thread): ``init_quat = yaw(robot torso) * yaw(reference root)^T``,
  then every step ``motion->update(episode_length * step_dt + time_start)`` before ``env->step()``;
- ``State_Mimic.cpp:9-33,70-108``: the registered terms ``motion_command`` (reference joint positions then
  velocities), ``motion_anchor_ori_b`` (``rot = ((init * ref_torso)^-1 * real_torso)^T``, 6D r00 r01 r10 r11
  r20 r21; torso = root quaternion times waist yaw (z), roll (x), pitch (y)); ``base_ang_vel``,
  ``joint_pos_rel``, ``joint_vel_rel``, ``last_action`` (``include/isaaclab/envs/mdp/observations.h``, read at
  5dc06a4);
- ``robots/g1_29dof/include/State_Mimic.h:38-115`` (``MotionLoader_``): ``dt = 1 / fps``; rows of
  ``isaaclab::load_csv``: columns 0-2 root position, 3-6 root quaternion x y z w, 7.. joints; velocities as
  forward differences, the last repeated; ``update``: ``phase = clamp(t / (N dt), 0, 1)``, frame
  ``round(phase (N - 1))``, ``blend = round((t - frame dt) / dt 1e5) / 1e5``; positions and velocities blended
  linearly, the root quaternion by Eigen's slerp; all in float32;
- ``isaaclab::load_csv`` (unitree_rl_mjlab 5b7e396 ``deploy/include/isaaclab/utils/utils.h:19-48``): one row per
  line (``std::getline``), fields split at ``,``, ``std::stof`` each: an unparsable field is logged and
  skipped (a header row comes out empty: the loader then reads past it), a value out of float range
  (overflow, subnormal) throws ``std::out_of_range``, which nothing catches.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bcg_deploy.export import unitree_rl_lab as url
from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.robots import load_robot
from bcg_deploy.training.checkpoint import load_checkpoint, robot_of_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

from .test_replica_unitree_rl_mjlab import DeployError, StateMimicReplica, _qmat, _torso, _yaw

F32 = np.float32
STATES = {"State_Passive", "State_FixStand", "State_RLBase", "State_Mimic"}
NUM_COLUMNS = 7 + 29


def _stof(field: str) -> float | None:
    """std::stof: None for an unparsable field (invalid_argument, caught by load_csv); out_of_range raises."""
    try:
        v = float(field.strip())
    except ValueError:
        return None
    if math.isfinite(v) and (abs(v) > np.finfo(F32).max or (v != 0.0 and abs(v) < np.finfo(F32).tiny)):
        raise DeployError(f"terminate called after throwing an instance of 'std::out_of_range': stof({field!r})")
    return float(F32(v))


def load_csv(path: Path) -> list[list[float]]:
    text = path.read_text()
    lines = text.split("\n")
    if lines and lines[-1] == "":  # std::getline yields no row after a final newline
        lines = lines[:-1]
    return [[v for v in (_stof(f) for f in line.split(",")) if v is not None] for line in lines]


def _slerp(a: np.ndarray, b: np.ndarray, t: F32) -> np.ndarray:
    """Eigen ``Quaternion::slerp`` (w x y z arrays, float32)."""
    d = F32(np.dot(a, b))
    if abs(d) >= F32(1) - np.finfo(F32).eps:
        s0, s1 = F32(1) - t, t
    else:
        th = F32(np.arccos(abs(d)))
        s0, s1 = F32(np.sin((F32(1) - t) * th) / np.sin(th)), F32(np.sin(t * th) / np.sin(th))
    return (s0 * a + (-s1 if d < 0 else s1) * b).astype(F32)


def _round(x: F32) -> F32:  # std::round: half away from zero
    return F32(np.sign(x) * np.floor(abs(x) + F32(0.5)))


class MotionLoader:
    """``State_Mimic::MotionLoader_`` in float32."""

    def __init__(self, path: Path, fps: float) -> None:
        self.dt = F32(1.0) / F32(fps)
        rows = load_csv(path)
        bad = [i + 1 for i, r in enumerate(rows) if len(r) != NUM_COLUMNS]
        if bad:  # Map(data[i].data() + 7, size - 7) past a short row: garbage, or a wrong joint count
            raise DeployError(f"{path}: row {bad[0]} has {len(rows[bad[0] - 1])} values, the G1 loader reads 36")
        d = np.asarray(rows, F32)
        self.n = len(d)
        self.duration = F32(self.n) * self.dt
        self.root_pos = d[:, 0:3]
        self.root_quat = np.stack((d[:, 6], d[:, 3], d[:, 4], d[:, 5]), axis=1)  # Quaternionf(w=d6, x=d3, ...)
        self.dof_pos = d[:, 7:]
        vel = (self.dof_pos[1:] - self.dof_pos[:-1]) / self.dt
        self.dof_vel = np.concatenate((vel, vel[-1:]), axis=0).astype(F32)
        self.update(F32(0))

    def update(self, time: F32) -> None:
        phase = np.clip(F32(time) / self.duration, F32(0), F32(1))
        self.i0 = int(_round(phase * F32(self.n - 1)))
        self.i1 = min(self.i0 + 1, self.n - 1)
        self.blend = _round((F32(time) - F32(self.i0) * self.dt) / self.dt * F32(1e5)) / F32(1e5)

    def joint_pos(self) -> np.ndarray:
        return self.dof_pos[self.i0] * (F32(1) - self.blend) + self.dof_pos[self.i1] * self.blend

    def joint_vel(self) -> np.ndarray:
        return self.dof_vel[self.i0] * (F32(1) - self.blend) + self.dof_vel[self.i1] * self.blend

    def root_quaternion(self) -> np.ndarray:
        return _slerp(self.root_quat[self.i0], self.root_quat[self.i1], self.blend)


class LabMimicReplica:
    """The FSM config, the Mimic state's constructor, ``enter()`` and one ``env->step()`` per ``step``."""

    def __init__(self, proj_dir: Path, state: str) -> None:
        cfg_path = proj_dir / "config" / "config.yaml"
        self.config = yaml.safe_load(cfg_path.read_text())
        fsm = self.config["FSM"]
        ids: dict[int, str] = {}
        for name, entry in fsm["_"].items():
            kind = "State_" + str(entry.get("type", name))
            if kind not in STATES:
                raise DeployError(f"FSM: Unknown FSM type {entry.get('type', name)}")
            if int(entry["id"]) in ids:
                raise DeployError(f"FSM: State_{name} already exists")
            ids[int(entry["id"])] = name
        cfg = fsm[state]
        policy_dir = Path(cfg["policy_dir"])
        policy_dir = policy_dir if policy_dir.is_absolute() else proj_dir / policy_dir
        if not (policy_dir / "exported").exists():
            subs = sorted(p for p in policy_dir.iterdir() if p.is_dir() and (p / "exported").exists())
            policy_dir = subs[-1] if subs else policy_dir
        motion_file = Path(cfg["motion_file"])
        motion_file = motion_file if motion_file.is_absolute() else proj_dir / motion_file
        self.motion = MotionLoader(motion_file, float(cfg["fps"]))
        self.time_start = F32(np.clip(F32(cfg.get("time_start", 0.0)), 0, self.motion.duration))
        self.env = StateMimicReplica(policy_dir, None)
        if "Velocity" not in ids.values():
            raise DeployError('FSMStringMap.right.at("Velocity"): std::out_of_range')

    def enter(self, qpos: np.ndarray) -> None:
        ref_yaw = _yaw(_qmat(self.motion.root_quaternion()))
        self.init = _yaw(_torso(qpos[3:7], qpos[7:])) @ ref_yaw.T
        self.motion.update(self.time_start)
        self.episode_length = 0
        self.last_action = np.zeros(self.env.action_dim, F32)

    def step(self, qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.motion.update(F32(self.episode_length) * F32(self.env.step_dt) + self.time_start)
        jp = self.motion.joint_pos()
        real = _torso(qpos[3:7], qpos[7:])
        ref = _torso(self.motion.root_quaternion(), jp)
        rot = ((self.init @ ref).T @ real).T
        obs, target = self.env.act({
            "motion_command": np.concatenate((jp, self.motion.joint_vel())),
            "motion_anchor_ori_b": rot[:, :2].reshape(-1),
            "base_ang_vel": qvel[3:6],
            "joint_pos_rel": qpos[7:] - self.env.default,
            "joint_vel_rel": qvel[6:],
            "last_action": self.last_action,
        })  # fmt: skip
        self.last_action = ((target - self.env.offset) / self.env.scale).astype(F32)  # the raw action
        self.episode_length += 1
        return obs, target


def install(res, proj_dir: Path, base: dict | None = None) -> str:
    """Copy the exported policy folder to ``config/policy/mimic/<folder>/`` of a project folder whose
    config.yaml has Passive and Velocity, merged with our FSM entry; returns the Mimic state's name."""
    root = res.path.parent.parent
    shutil.copytree(root, proj_dir / "config" / "policy" / "mimic" / root.name)
    ours = yaml.safe_load(res.side_files["fsm_config"].read_text())["FSM"]
    fsm = base or {"_": {"Passive": {"id": 1}, "Velocity": {"id": 3, "type": "RLBase"}},
                   "Velocity": {"policy_dir": "config/policy/velocity"}}  # fmt: skip
    fsm["_"].update(ours.pop("_"))
    fsm.update(ours)
    (proj_dir / "config" / "config.yaml").write_text(yaml.safe_dump({"FSM": fsm}))
    return next(k for k in ours)


def _clip_state(a: dict, k: int, yaw: float, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clip frame k in MuJoCo layout, the whole clip turned by ``yaw`` about z and moved by ``shift``."""
    c, s = math.cos(yaw / 2), math.sin(yaw / 2)
    w, x, y, z = a["root_quat"][k]
    quat = np.array([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w])
    rz = _qmat([c, 0.0, 0.0, s])
    q = np.concatenate((rz @ a["root_pos"][k] + shift, quat, a["joint_pos"][k]))
    qd = np.concatenate((rz @ a["root_lin_vel"][k], _qmat(a["root_quat"][k]).T @ a["root_ang_vel"][k],
                         a["joint_vel"][k]))  # fmt: skip
    return q, qd


def test_state_mimic_loads_and_drives_our_export(tiny_unitree, tmp_path):
    """Installed as the FSM entry says, the state loads; at every control step it reads clip frame k exactly;
    over 40 steps with the robot on the (turned, moved) clip, its observation equals the training observation
    except the reference joint velocities, which it derives by forward differences (measured against the
    clip's below), and its joint target is default + scale x tanh(actor mean) of it in float64 torch."""
    run, res = tiny_unitree
    state = install(res, tmp_path)
    rep = LabMimicReplica(tmp_path, state)
    ck = load_checkpoint(run)
    a = {k: np.asarray(v, np.float64) for k, v in ck["motion_arrays"].items() if k != "fps"}
    n = a["joint_pos"].shape[0]
    assert rep.motion.n == n and rep.env.step_dt == 0.02 and float(rep.motion.dt) == pytest.approx(1 / 50)
    step = np.abs(np.diff(a["joint_pos"], axis=0, prepend=a["joint_pos"][:1])).max(axis=1)
    for k in range(n):  # fps = the control rate: step k reads frame k, blended with a neighbour by the float32
        rep.motion.update(F32(k) * F32(rep.env.step_dt))  # rounding of k * step_dt (blend 1 +- 3e-5 at worst)
        err = np.abs(rep.motion.joint_pos() - a["joint_pos"][k]).max()
        assert err <= 1e-6 + 5e-5 * step[k], (k, err)
        np.testing.assert_allclose(rep.motion.root_quaternion(), a["root_quat"][k], atol=2e-6)
    fd = (a["joint_pos"][1:] - a["joint_pos"][:-1]) * 50.0
    np.testing.assert_allclose(rep.motion.dof_vel[:-1], fd, atol=2e-4)  # forward differences of the CSV
    assert np.all(a["joint_pos"][0, 12:15] == 0.0)  # waist at the start: the anchor alignment is training's
    robot = robot_of_checkpoint(ck, load_robot("g1"))  # the scale the run trained with
    om = ProfileObservation(robot, ck["motion_arrays"], "unitree", dtype=torch.float64)
    actor = Actor.from_state_dict(ck["actor"]).double()
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]).double()
    yaw, shift = -1.1, np.array([0.4, 2.0, 0.0])
    rep.enter(_clip_state(a, 0, yaw, shift)[0])
    last = np.zeros(29)
    for k in range(40):
        q, qd = _clip_state(a, k, yaw, shift)
        obs, target = rep.step(q, qd)
        q0, qd0 = _clip_state(a, k, 0.0, np.zeros(3))
        with torch.no_grad():
            train = om(torch.as_tensor(q0)[None], torch.as_tensor(qd0)[None], torch.tensor([k]),
                       torch.as_tensor(last)[None])[0].numpy()  # fmt: skip
            act = actor.deterministic(norm(torch.as_tensor(obs, dtype=torch.float64)[None]))[0].numpy()
        keep = np.r_[0:29, 58:154]  # all but the reference joint velocities
        np.testing.assert_allclose(obs[keep], train[keep], atol=2e-5, err_msg=f"step {k}")
        np.testing.assert_allclose(obs[29:58], rep.motion.dof_vel[k], atol=1e-6)
        np.testing.assert_allclose(target, robot.default_joint_pos + robot.action_scale * act, atol=1e-5)
        last = rep.last_action.astype(np.float64)


def test_motion_csv_and_fsm_entry_format(tiny_unitree):
    """No header, 36 comma-separated float32-exact values per line, no blank line, nothing std::stof rejects;
    the FSM entry names fps = the clip's rate and paths in the policy folder."""
    run, res = tiny_unitree
    text = res.side_files["motion_csv"].read_text()
    lines = text.split("\n")
    assert lines[-1] == "" and all(lines[:-1])
    rows = np.array([[float(v) for v in line.split(",")] for line in lines[:-1]])
    ck = load_checkpoint(run)
    a = ck["motion_arrays"]
    assert rows.shape == (a["joint_pos"].shape[0], 36)
    np.testing.assert_array_equal(rows.astype(F32), url.motion_rows(a))  # %.9g round-trips float32
    q = np.asarray(a["root_quat"], np.float64)
    np.testing.assert_allclose(rows[:, 3:7], np.concatenate((q[:, 1:], q[:, :1]), 1), atol=1e-7)  # x y z w
    fsm = yaml.safe_load(res.side_files["fsm_config"].read_text())["FSM"]
    name = url.state_name(ck["motion"]["name"])
    assert fsm["_"] == {name: {"id": url.FSM_ID, "type": "Mimic"}} and fsm[name]["fps"] == float(a["fps"]) == 50.0
    folder = res.path.parent.parent.name
    assert fsm[name]["motion_file"] == f"config/policy/mimic/{folder}/params/{res.side_files['motion_csv'].name}"
    subnormal = {"root_pos": np.full((2, 3), 1e-40), "root_quat": np.tile([1.0, 0, 0, 0], (2, 1)),
                 "joint_pos": np.zeros((2, 29)), "fps": 50.0}  # fmt: skip
    assert url.motion_csv(subnormal).startswith(b"0,0,0,0,0,0,1,")


def test_negative_controls(tiny_unitree, tmp_path):
    """A header line, a subnormal value, a missing Velocity state, a clashing id: each one fails the replica."""
    _, res = tiny_unitree
    csv = res.side_files["motion_csv"]
    good = csv.read_text()
    (tmp_path / "header.csv").write_text("x,y,z,qx,qy,qz,qw\n" + good)
    with pytest.raises(DeployError, match="row 1 has 0 values"):
        MotionLoader(tmp_path / "header.csv", 50.0)
    (tmp_path / "tiny.csv").write_text(good.replace(good.split(",")[0], "1e-40", 1))
    with pytest.raises(DeployError, match="out_of_range"):
        MotionLoader(tmp_path / "tiny.csv", 50.0)
    proj = tmp_path / "p1"
    state = install(res, proj, {"_": {"Passive": {"id": 1}}})
    with pytest.raises(DeployError, match="Velocity"):
        LabMimicReplica(proj, state)
    proj = tmp_path / "p2"
    state = install(res, proj, {"_": {"Passive": {"id": 1}, "Velocity": {"id": url.FSM_ID, "type": "RLBase"}}})
    with pytest.raises(DeployError, match="already exists"):
        LabMimicReplica(proj, state)
