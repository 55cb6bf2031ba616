"""The observation profiles (G1, 29 joints): term names, sizes, order, noise, history and on-board signal.

- ``paper`` (849): bcgd's own raw-state ONNX; METHOD.md section 6 (``make_obs_terms``).
- ``beyondmimic`` (160): motion_tracking_controller (the whole_body_tracking / mjlab G1 tracking actor):
  command (58), motion_anchor_pos_b (3), motion_anchor_ori_b (6), base_lin_vel (3), base_ang_vel (3),
  joint_pos (29), joint_vel (29), actions (29).
- ``beyondmimic_wose`` (154): the same controller, whole_body_tracking's no-state-estimation variant
  (``G1FlatWoStateEstimationEnvCfg``): the above without motion_anchor_pos_b and base_lin_vel.
- ``unitree`` (154): unitree_rl_mjlab's G1 ``State_Mimic`` (deploy.yaml observations): motion_command (58),
  motion_anchor_ori_b (6), base_ang_vel (3), joint_pos_rel (29), joint_vel_rel (29), last_action (29).
  unitree_rl_lab's g1_29dof ``State_Mimic`` builds the same terms (its ``State_Mimic.cpp``, commit 4711dee).
- ``holosoma`` (154): holosoma's whole-body-tracking inference (``WholeBodyTrackingPolicy``): the same six
  quantities under holosoma's names, in ALPHABETICAL order, because both its trainer and its inference
  concatenate the terms sorted by name: actions (29), base_ang_vel (3), dof_pos (29), dof_vel (29),
  motion_command (58), motion_ref_ori_b (6; reference body torso_link). Its inference takes the default pose
  and the action scale from its own config, never from the ONNX, so the profile pins both (below). Its
  inference also builds the motion terms from the ONNX outputs of the PREVIOUS call (frame t - 1 at step t,
  frame 0 at the first step: ``policies/wbt.py:266-269,304-305``) where its trainer uses frame t
  (``envs/base_task/base_task.py:425-447``: the command steps before the observation): reference_lag 1.

Sources (read at these commits): whole_body_tracking cd65172 ``tasks/tracking/tracking_env_cfg.py``
lines 113-133 (policy-group terms, order, noise) and ``config/g1/flat_env_cfg.py`` lines 15 (anchor
torso_link) and 35-39 (no-state-estimation variant); unitree_rl_mjlab 5b7e396
``deploy/robots/g1/config/policy/mimic/dance1_subject2/params/deploy.yaml`` lines 17-53; holosoma fc600e7
(paths under ``src/``): ``holosoma/holosoma/managers/observation/manager.py:138-142`` (training concatenates
sorted), ``holosoma_inference/holosoma_inference/policies/base.py:125-136,498-527`` (inference sorts too),
``holosoma/holosoma/config_values/wbt/g1/observation.py:5-41`` (actor terms, noise, scale 1.0),
``holosoma_inference/.../config/config_values/observation.py:106-142`` (sizes),
``holosoma_inference/.../policies/wbt.py:262-293`` (what each term is on board), the default pose
``holosoma_inference/.../config/config_values/robot.py:34-40`` (= the trainer's
``holosoma/holosoma/config_values/robot.py:346-376``) and the action scale 1.0
``holosoma_inference/.../config/config_values/task.py:29`` (= the trainer's
``holosoma/holosoma/config_values/wbt/g1/experiment.py:51``), applied as
``q_target = default_dof_angles + policy_action_scale * actions`` (``policies/base.py:596``,
``policies/wbt.py:307-312``).

Every deployable term is a *quantity* of ``terms.py`` (several consumers' names map onto one): the
robot's torso ("anchor") frame for the motion terms, the pelvis (IMU) frame for the velocities, joint
angles relative to the default pose, and the previous action (the policy's own output in (-1, 1)).
Each reads the reference motion at the CURRENT frame t (the state's own frame), as both consumers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import RobotSpec

FUTURE_STEPS = (1, 2, 3)
DEFAULT_PROFILE = "paper"
ANCHOR_BODY = "torso_link"


@dataclass(frozen=True)
class ObsTerm:
    """One observation term: ``size`` entries (all frames), noise U(-noise, noise) in ``units``.

    ``quantity`` (deployable profiles): the ``terms.py`` maths computing it; ``history``: frames stacked.
    Both are left out of ``to_dict`` when unset, so the paper spec stays what old checkpoints hold.
    """

    name: str
    size: int
    noise: float
    units: str
    frame: str
    description: str
    future_steps: tuple[int, ...] = ()
    quantity: str = ""
    history: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["future_steps"] = list(self.future_steps)
        if not self.quantity:
            d.pop("quantity")
            d.pop("history")
        return d


def make_obs_terms(
    num_bodies: int = 30, num_joints: int = 29, num_key_points: int = 5, future_steps: Sequence[int] = FUTURE_STEPS
) -> tuple[ObsTerm, ...]:
    """The paper observation declaration (order = layout); see ``observations/paper.py``."""
    f = tuple(int(k) for k in future_steps)
    n = len(f)
    hb = "robot heading frame (yaw of root)"
    return (
        ObsTerm("root_height", 1, 0.01, "m", "world z", "root (pelvis) height"),
        ObsTerm("root_rot", 6, 0.05, "rad", hb, "root rotation 6D (first two columns of H^T R_root)"),
        ObsTerm("root_lin_vel", 3, 0.5, "m/s", hb, "root linear velocity"),
        ObsTerm("root_ang_vel", 3, 0.2, "rad/s", hb, "root angular velocity"),
        ObsTerm("body_rot", 6 * num_bodies, 0.01, "rad", hb, "body rotations 6D, body_names order"),
        ObsTerm("joint_vel", num_joints, 0.5, "rad/s", "joint", "hinge rates, joint_names order"),
        ObsTerm("key_pos", 3 * num_key_points, 0.01, "m", hb, "key points minus root position"),
        ObsTerm("ref_root_pos", 3 * n, 0.25, "m", hb, "reference root minus robot root position", f),
        ObsTerm("ref_root_rot", 6 * n, 0.0, "rad", hb, "reference root rotation 6D", f),
        ObsTerm("ref_body_rot", 6 * num_bodies * n, 0.0, "rad", hb, "reference body rotations 6D", f),
        ObsTerm("ref_key_pos", 3 * num_key_points * n, 0.0, "m", hb, "reference key points minus reference root", f),
    )


# On-board signal each quantity needs (what the deploy side must have to build it).
SIGNALS = {
    "motion_command": "reference motion (joint positions and velocities of frame t)",
    "motion_anchor_pos_b": "state estimate of the torso position (world) + reference anchor position",
    "motion_anchor_ori_b": "IMU orientation + waist encoders (torso orientation) + reference anchor orientation",
    "base_lin_vel_b": "state estimate of the pelvis linear velocity",
    "base_ang_vel_b": "IMU gyroscope (pelvis frame)",
    "joint_pos_rel": "joint encoders minus the default pose",
    "joint_vel_rel": "joint encoder rates",
    "last_action": "the policy's previous output",
}
PAPER_SIGNALS = {
    "root_height": "motion-capture-grade state estimate (height)",
    "root_rot": "IMU orientation",
    "root_lin_vel": "state estimate of the pelvis linear velocity",
    "root_ang_vel": "IMU gyroscope",
    "body_rot": "IMU orientation + joint encoders (forward kinematics)",
    "joint_vel": "joint encoder rates",
    "key_pos": "joint encoders (forward kinematics)",
    "ref_root_pos": "motion-capture-grade world position of the robot + reference",
    "ref_root_rot": "IMU heading + reference",
    "ref_body_rot": "IMU heading + reference",
    "ref_key_pos": "IMU heading + reference",
}
_TA = "robot anchor (torso_link) frame"
_QUANTITY = {  # quantity: (size for 29 joints, units, frame, description)
    "motion_command": (58, "rad, rad/s", "joint", "reference joint positions then velocities at frame t"),
    "motion_anchor_pos_b": (3, "m", _TA, "R_a^T (p_ref_anchor - p_anchor)"),
    "motion_anchor_ori_b": (6, "1", _TA, "R_a^T R_ref_anchor, first two columns row-major (r00 r01 r10 r11 r20 r21)"),
    "base_lin_vel_b": (3, "m/s", "pelvis frame", "R_pelvis^T v_pelvis(world)"),
    "base_ang_vel_b": (3, "rad/s", "pelvis frame", "pelvis angular velocity (gyroscope)"),
    "joint_pos_rel": (29, "rad", "joint", "joint angles minus the default pose"),
    "joint_vel_rel": (29, "rad/s", "joint", "joint rates"),
    "last_action": (29, "1", "action", "previous action in (-1, 1), before scaling"),
}


def term_spec(terms: Sequence[ObsTerm]) -> list[dict[str, Any]]:
    """JSON-able term list with offsets, in layout order."""
    out, off = [], 0
    for t in terms:
        out.append({**t.to_dict(), "offset": off})
        off += t.size
    return out


def _term(name: str, quantity: str, noise: float) -> ObsTerm:
    size, units, frame, desc = _QUANTITY[quantity]
    return ObsTerm(name, size, noise, units, frame, desc, quantity=quantity)


@dataclass(frozen=True)
class ObsProfile:
    """One actor observation: ``terms`` in layout order, the consumer it is for, its anchor body.

    ``default_joint_pos`` (rad, joint order) and ``action_scale`` (rad per unit action, every joint): set when
    the consumer's runtime computes ``q_target = default + scale * action`` from constants of its own config
    and ignores whatever the exported file says. The actor must then be trained with exactly those (the
    joint_pos_rel term and the action's meaning depend on them), so training, export and sim2sim take them
    from here (``pin``) instead of from the robot.

    ``reference_lag`` (control steps): how many steps late the consumer's runtime hands the reference to the
    motion terms; the actor is trained on the same (``motion_*`` quantities read frame ``max(t - lag, 0)``).
    """

    name: str
    consumer: str
    terms: tuple[ObsTerm, ...]
    anchor_body: str | None = None
    sources: tuple[str, ...] = field(default=())
    default_joint_pos: tuple[float, ...] | None = None
    action_scale: float | None = None
    reference_lag: int = 0

    @property
    def obs_dim(self) -> int:
        return sum(t.size for t in self.terms)

    @property
    def term_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms)

    @property
    def deployable(self) -> bool:
        return self.name != "paper"

    def signal(self, term: str) -> str:
        t = next(x for x in self.terms if x.name == term)
        return SIGNALS[t.quantity] if t.quantity else PAPER_SIGNALS[t.name]

    def spec(self) -> list[dict[str, Any]]:
        """JSON-able term list with offsets (what run.pt and the ONNX metadata store)."""
        return term_spec(self.terms)

    @property
    def pins(self) -> bool:
        """Whether the consumer fixes the default pose or the action scale (see the class docstring)."""
        return self.default_joint_pos is not None or self.action_scale is not None

    def pin(self, robot: RobotSpec) -> RobotSpec:
        """``robot`` with this profile's fixed default pose and action scale (unchanged where not fixed)."""
        if self.default_joint_pos is not None:
            if len(self.default_joint_pos) != robot.num_joints:
                raise BcgdError(
                    f"profile {self.name} fixes a {len(self.default_joint_pos)}-joint default pose; robot "
                    f"{robot.name} has {robot.num_joints} joints"
                )
            robot = robot.with_default_pose(self.default_joint_pos)
        return robot.with_action_scale(self.action_scale)


_WBT = "HybridRobotics/whole_body_tracking source/whole_body_tracking/whole_body_tracking/tasks/tracking/"
_BM = (
    _term("command", "motion_command", 0.0),
    _term("motion_anchor_pos_b", "motion_anchor_pos_b", 0.25),
    _term("motion_anchor_ori_b", "motion_anchor_ori_b", 0.05),
    _term("base_lin_vel", "base_lin_vel_b", 0.5),
    _term("base_ang_vel", "base_ang_vel_b", 0.2),
    _term("joint_pos", "joint_pos_rel", 0.01),
    _term("joint_vel", "joint_vel_rel", 0.5),
    _term("actions", "last_action", 0.0),
)
PROFILES: dict[str, ObsProfile] = {
    "paper": ObsProfile("paper", "bcgd (raw-state ONNX)", make_obs_terms(), None, ("METHOD.md section 6",)),
    "beyondmimic": ObsProfile(
        "beyondmimic",
        "HybridRobotics/motion_tracking_controller",
        _BM,
        ANCHOR_BODY,
        (_WBT + "tracking_env_cfg.py:113-133", _WBT + "config/g1/flat_env_cfg.py:15"),
    ),
    "beyondmimic_wose": ObsProfile(
        "beyondmimic_wose",
        "HybridRobotics/motion_tracking_controller",
        tuple(t for t in _BM if t.name not in ("motion_anchor_pos_b", "base_lin_vel")),
        ANCHOR_BODY,
        (_WBT + "config/g1/flat_env_cfg.py:35-39",),
    ),
    "unitree": ObsProfile(
        "unitree",
        "unitreerobotics/unitree_rl_mjlab (G1 State_Mimic)",
        (
            _term("motion_command", "motion_command", 0.0),
            _term("motion_anchor_ori_b", "motion_anchor_ori_b", 0.05),
            _term("base_ang_vel", "base_ang_vel_b", 0.2),
            _term("joint_pos_rel", "joint_pos_rel", 0.01),
            _term("joint_vel_rel", "joint_vel_rel", 0.5),
            _term("last_action", "last_action", 0.0),
        ),
        ANCHOR_BODY,
        (
            "unitreerobotics/unitree_rl_mjlab deploy/robots/g1/config/policy/mimic/dance1_subject2/params/"
            "deploy.yaml:17-53",
        ),
    ),
}


_HOLO = "amazon-far/holosoma src/"
_HOLO_INF = _HOLO + "holosoma_inference/holosoma_inference/"
# holosoma's G1 default_dof_angles (rad), in its dof_names order, which is RobotSpec.joint_names's (the G1 SDK
# motor order): legs (hip pitch, roll, yaw, knee, ankle pitch, roll) left then right, waist (yaw, roll,
# pitch), arms (shoulder pitch, roll, yaw, elbow, wrist roll, pitch, yaw) left then right.
HOLOSOMA_DEFAULT_JOINT_POS = (
    -0.312, 0.0, 0.0, 0.669, -0.363, 0.0,
    -0.312, 0.0, 0.0, 0.669, -0.363, 0.0,
    0.0, 0.0, 0.0,
    0.2, 0.2, 0.0, 0.6, 0.0, 0.0, 0.0,
    0.2, -0.2, 0.0, 0.6, 0.0, 0.0, 0.0,
)  # fmt: skip
HOLOSOMA_ACTION_SCALE = 1.0
PROFILES["holosoma"] = ObsProfile(
    "holosoma",
    "amazon-far/holosoma (whole-body-tracking inference, WholeBodyTrackingPolicy)",
    (
        _term("actions", "last_action", 0.0),
        _term("base_ang_vel", "base_ang_vel_b", 0.2),
        _term("dof_pos", "joint_pos_rel", 0.01),
        _term("dof_vel", "joint_vel_rel", 0.5),
        _term("motion_command", "motion_command", 0.0),
        _term("motion_ref_ori_b", "motion_anchor_ori_b", 0.05),
    ),
    ANCHOR_BODY,
    (
        _HOLO + "holosoma/holosoma/managers/observation/manager.py:138-142",
        _HOLO + "holosoma/holosoma/config_values/wbt/g1/observation.py:5-41",
        _HOLO_INF + "policies/base.py:125-136",
        _HOLO_INF + "policies/wbt.py:262-293",
        _HOLO_INF + "config/config_values/robot.py:34-40",
        _HOLO_INF + "config/config_values/task.py:29",
    ),
    default_joint_pos=HOLOSOMA_DEFAULT_JOINT_POS,
    action_scale=HOLOSOMA_ACTION_SCALE,
    reference_lag=1,
)


def raw_noise(profile: ObsProfile) -> dict[str, Any]:
    """Training noise of the profile's terms mapped onto the raw state sim2sim perturbs before it builds
    the observation (``bcgd.input_noise``; 0 for a state the profile does not read)."""
    n = {t.quantity: t.noise for t in profile.terms}
    pos = n.get("motion_anchor_pos_b", 0.0)
    return {
        "base_pos": [pos, pos, pos],
        "base_quat": n.get("motion_anchor_ori_b", 0.0),
        "base_lin_vel": n.get("base_lin_vel_b", 0.0),
        "base_ang_vel": n.get("base_ang_vel_b", 0.0),
        "joint_pos": n.get("joint_pos_rel", 0.0),
        "joint_vel": n.get("joint_vel_rel", 0.0),
    }


def get_profile(name: str) -> ObsProfile:
    """The declaration named ``name``; an unknown name is a one-line ``BcgdError``."""
    if name not in PROFILES:
        raise BcgdError(f"observation profile {name!r}: expected one of {', '.join(PROFILES)}")
    return PROFILES[name]


def profile_of_config(cfg: Any) -> str:
    """The actor's profile recorded in a checkpoint's config (plain dict); old checkpoints: ``paper``."""
    env = cfg.get("env", {}) if isinstance(cfg, dict) else {}
    name = env.get("obs_profile", DEFAULT_PROFILE) if isinstance(env, dict) else DEFAULT_PROFILE
    return str(name or DEFAULT_PROFILE)
