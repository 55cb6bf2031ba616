"""Typed training configuration (mjlab-style dataclasses) with every METHOD.md default.

``TrainConfig`` nests one dataclass per role. ``to_dict`` turns it into plain values (what ``run.pt``
and ``config.yaml`` record), ``from_dict`` rebuilds it (resume), and ``apply_overrides`` applies the
CLI's ``--set a.b=v`` strings with type checking. Units are SI; angles in rad; times in s.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from bcg_deploy.errors import BcgdError
from bcg_deploy.profiles import PROFILES
from bcg_deploy.robots import RobotSpec, load_robot
from bcg_deploy.training.config_checks import check_bcg_cfg, check_values

TASKS = ("run", "jump", "fight", "dance")


@dataclass
class MotionCfg:
    """Which reference clip to imitate."""

    task: str = "dance"
    """Built-in task name (run | jump | fight | dance); ignored when ``csv`` is set."""
    csv: str | None = None
    """A LAFAN1-format G1 CSV (30 fps, xyzw quaternion) to use instead of a task."""
    start_s: float = 0.0
    """Window start in the CSV (s)."""
    duration_s: float = 15.0
    """Window length in the CSV (s)."""


@dataclass
class SimCfg:
    """Training simulator (METHOD.md section 2)."""

    physics_dt: float = 0.005
    """Physics step (s)."""
    substeps: int = 4
    """Physics steps per control step (control dt = physics_dt * substeps = 0.02 s)."""
    kappa: float = 300.0
    """Contact smoothing stiffness (1/m): 300 stiff/deployable, 50-100 soft."""
    dtype: Literal["float32", "float64"] = "float32"
    """Simulator and network precision."""
    gravity: bool = True
    """Gravity on (False: a floating robot; for debugging the learning loop without contact)."""
    contact_iterations: int = 10
    """Projected Gauss-Seidel sweeps of the contact solve."""
    contact_step: Literal["scalar", "component"] = "scalar"
    """Gauss-Seidel step: "scalar" (Lipschitz in the state; ``SimConfig.contact_step``) or "component"."""
    bias_velocity: Literal["start", "midpoint"] = "start"
    """Velocity of the bias forces: METHOD.md's substep start velocity, or the predicted midpoint velocity."""
    graphs: bool = False
    """Replay each control step's kernel launches as captured Warp graphs (``SimConfig.graphs``). Off for
    training: at 32 envs an iteration takes the same time either way (1.62 s with graphs, 1.64 s without),
    and Warp's CPU graph capture has crashed training processes (a segmentation fault in libc memset)."""


@dataclass
class EnvCfg:
    """The imitation task (METHOD.md section 6)."""

    num_envs: int = 128
    """Parallel environments E: the paper's plain-SHAC batch. The paper trains SHAC + BCG with 64, which
    ``bcg_defaults`` sets (the CLI applies it to ``--bundle`` runs when ``--envs`` is not given)."""
    fall_height: float = 0.3
    """Early termination when the root height drops below this (m)."""
    max_tracking_error: float | None = 0.5
    """Early termination when the mean per-body position error to the reference exceeds this (m); None: off
    (METHOD.md terminates on falls only). Stops a policy from buying episode length by giving up on a
    travelling clip (run), where the reference runs away from a robot that only keeps its balance."""
    action_scale: float | None = None
    """One action scale for every joint (rad): ``q_target = default + action_scale * a``, in place of the
    per-joint scale and ``action_scale_factor``; None: the robot's own per-joint scale (0.25 x effort / kp, the
    deployed trackers' recipe) times the factor. An earlier version of the paper's parameter table gives 0.4.
    Recorded in run.pt and written into the ONNX like the robot's own."""
    action_scale_factor: float = 2.0
    """Multiplies the robot's own per-joint scale (2.0: 0.5 x effort / kp). The tanh bounds |a| <= 1, so this
    is the reach of the PD target; trackers with unbounded Gaussian actions (BeyondMimic) reach past 1 x
    scale, and at 1 x the PD target cannot reach 39-44 % of the LAFAN1 windows' joint-frames (18-25 % at 2 x).
    Unused when ``action_scale`` is set or the observation profile fixes the scale (holosoma). Recorded in
    run.pt and the ONNX as the resulting per-joint scale."""
    obs_profile: str = "beyondmimic_wose"
    """The actor's observation profile (``bcg_deploy.profiles``): beyondmimic_wose (the default: what
    motion_tracking_controller builds without a state estimator), beyondmimic, unitree (what those deploy
    stacks build on board), or paper (METHOD's 849 values, which a robot does not measure on board)."""
    critic_obs: Literal["privileged", "actor"] = "privileged"
    """What the SHAC critics see with a deployable actor profile: ``privileged`` (asymmetric actor-critic:
    the paper's 849 noise-free values, which hold root height, velocities and the reference's future, plus
    the previous action), or ``actor`` (the actor's own terms, noise-free). The critic only trains; it is
    never exported, so it may see what the robot cannot measure. Paper-profile runs see the actor's."""
    obs_noise: bool = True
    """Add the observation module's per-term training noise U(-n, n) to the actor's input."""
    obs_noise_scale: float = 1.5
    """Multiplier on every term's noise amplitude: training at 1.5 x the levels sim2sim's ``--noise 1``
    injects leaves a margin for the sensors of the robot."""
    random_start: bool = True
    """Reference state initialisation at a random phase (else at frame 0)."""
    adaptive_start: bool = True
    """Draw the random phases by where episodes fail (falls and strays), favouring the seconds before
    them, instead of uniformly (BeyondMimic's adaptive sampling; ``training/env/start_sampling.py``)."""
    adaptive_bin_s: float = 1.0
    """Width of a start bin (s)."""
    adaptive_kernel_bins: int = 3
    """A failure weights its own bin and the ``adaptive_kernel_bins - 1`` bins before it..."""
    adaptive_decay: float = 0.8
    """...by ``adaptive_decay ** u`` for the bin ``u`` bins before it."""
    adaptive_uniform: float = 0.1
    """Share of the uniform distribution in the mix (keeps every bin visited)."""
    adaptive_alpha: float = 0.1
    """Weight of one iteration's failures in their exponential average."""
    first_frame_share: float = 0.2
    """Share of the random-phase resets that start at the clip's first frame instead (still with the reset
    noise): a deployed clip starts there, and neither uniform nor adaptive phases favour it. 0 draws nothing
    more, so the random streams stay as they were."""
    action_rate_weight: float = -0.8
    """Weight of the action-rate penalty mean_j (a_t - a_{t-1})_j^2 (Decision: mean over joints)."""
    self_collision_weight: float | None = None
    """Weight of the self-penetration penalty, per metre of depth summed over the robot's collision pairs, per
    control step (``training/env/self_collision.py``). None: ``SELF_COLLISION_WEIGHT`` for a deployable
    profile, 0 for the paper profile (METHOD's reward, which the paper's results were measured with). The
    training contact model has floor contact only; MuJoCo and the robot also collide the body with itself."""
    max_abs_qd: float = 100.0
    """An env whose |qd| exceeds this anywhere (m/s or rad/s) counts as exploded: reset, contributes 0."""
    max_abs_pos: float = 1000.0
    """An env whose |base position| exceeds this (m) counts as exploded."""


SELF_COLLISION_WEIGHT = -20.0
"""The deployable profiles' self-penetration weight: 2 cm of depth costs 0.4 per step, about a fifth of a
well-tracking step's ADD reward, so the penalty steers gaits away from leg-leg contact without outweighing
the reference where the clip itself brushes a hand past the hip."""


def self_collision_weight(env: EnvCfg) -> float:
    """The self-penetration weight a run trains with (``EnvCfg.self_collision_weight`` resolved)."""
    if env.self_collision_weight is not None:
        return env.self_collision_weight
    return 0.0 if env.obs_profile == "paper" else SELF_COLLISION_WEIGHT


@dataclass
class DomainRandCfg:
    """Domain randomisation (METHOD.md section 6); ranges are (low, high) or +/- half-widths."""

    enabled: bool = True
    friction: tuple[float, float] = (0.3, 1.6)
    """Foot-floor Coulomb coefficient, one per env. Spans whole_body_tracking's static (0.3-1.6) and dynamic
    (0.3-1.2) ranges: our contact has one coefficient for both."""
    base_mass_add: tuple[float, float] = (-3.0, 3.0)
    """Added to the pelvis mass (kg)."""
    link_mass_scale: tuple[float, float] = (0.8, 1.2)
    link_com_offset: float = 0.03
    """Link centre-of-mass offset half-width (m) per axis."""
    torso_com_offset: tuple[float, float, float] = (0.025, 0.05, 0.05)
    """Centre-of-mass offset half-widths (m) x, y, z of ``torso_body`` (whole_body_tracking's torso box);
    the torso draws from the larger of this and ``link_com_offset`` on each axis."""
    torso_body: str = "torso_link"
    kp_scale: tuple[float, float] = (0.8, 1.2)
    kd_scale: tuple[float, float] = (0.8, 1.2)
    armature_scale: tuple[float, float] = (0.75, 1.25)
    joint_friction_scale: tuple[float, float] = (0.5, 1.5)
    default_joint_offset: float = 0.01
    """Per-env offset of the default pose the actions are added to (rad, half-width)."""
    action_latency: tuple[int, int] = (0, 1)
    """Per-env action latency in control steps, uniform over the inclusive range."""
    push_interval_s: tuple[float, float] = (1.0, 3.0)
    push_lin_vel: tuple[float, float, float] = (0.5, 0.5, 0.2)
    """Push half-widths of the base linear velocity change x, y, z (m/s, world)."""
    push_ang_vel: tuple[float, float, float] = (0.52, 0.52, 0.78)
    """Push half-widths of the base angular velocity change roll, pitch, yaw (rad/s)."""
    reset_pos: tuple[float, float, float] = (0.05, 0.05, 0.01)
    """Reset root position noise half-widths x, y, z (m)."""
    reset_rot: tuple[float, float, float] = (0.1, 0.1, 0.2)
    """Reset root orientation noise half-widths roll, pitch, yaw (rad)."""
    reset_joint: float = 0.1
    """Reset joint position noise half-width (rad)."""
    reset_scale: float = 1.0
    """Training's reset noise is ``reset_pos / reset_rot / reset_joint`` times this: a margin around the box
    that the ONNX records and ``bcgd sim2sim`` perturbs its starts by. 1.0: the box as given."""


@dataclass
class ADDCfg:
    """Adversarial differential discriminator reward (METHOD.md section 5)."""

    hidden: tuple[int, ...] = (1024, 512)
    lr: float = 2.5e-4
    """SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum (Decision; MimicKit's SGD uses 0.9)."""
    weight_decay: float = 1e-4
    logit_reg: float = 0.01
    """Weight of ||W_out||^2."""
    grad_penalty: float = 2.0
    """Weight of 0.5 (E||grad D(neg)||^2 + E||grad D(0)||^2)."""
    reward_weight: float = 2.0
    """r = reward_weight * softplus(D(Delta))."""
    norm_floor: float = 1e-4
    """Floor of the running mean |Delta| the residual is divided by."""
    replay_size: int = 8192
    """Replay buffer of past (unnormalised) residuals."""
    batch_size: int = 512
    """Negatives per discriminator step (half current rollout, half replay)."""
    updates_per_iter: int = 1


@dataclass
class SHACCfg:
    """Short-horizon actor-critic (METHOD.md section 3)."""

    horizon: int = 32
    """Differentiable window N (control steps)."""
    gamma: float = 0.99
    lam: float = 0.95
    """TD(lambda)."""
    actor_lr: float = 5e-3
    critic_lr: float = 2e-3
    lr_min: float = 1e-5
    """Both learning rates decay linearly to this at the last iteration."""
    betas: tuple[float, float] = (0.7, 0.95)
    actor_grad_clip: float = 1.0
    critic_grad_clip: float = 10.0
    init_std: float = 1.0
    actor_hidden: tuple[int, ...] = (512, 256, 128)
    critic_hidden: tuple[int, ...] = (256, 256)
    num_critics: int = 3
    """Ensemble size; the value is the mean."""
    critic_bf16: bool = False
    """Run the critic regression's forward pass under bf16 autocast (fast on CPUs with AVX512-BF16 or AMX and
    on GPUs; other CPUs convert bf16 in software, slower than float32). The actor, reward and simulator chain
    and the target critic stay float32 either way. Off by default: at the paper's size its policies tracked
    1.5 cm worse than float32's (4 of 5 seeds, 200 iterations; bench/critic_precision.py)."""
    critic_iterations: int = 16
    critic_minibatches: int = 4
    target_alpha: float = 0.995
    """Polyak: target <- alpha target + (1 - alpha) critic."""
    normalize_obs: bool = True
    normalize_returns: bool = True
    """Divide rewards by the running std of the discounted return (SHAC's ret_rms)."""


@dataclass
class PPOCfg:
    """PPO (rsl_rl's implementation; ``training/ppo.py``) with the paper's settings as defaults.

    Same env, observation, ADD reward, terminations and domain randomisation as SHAC; the simulator runs
    forward-only. The networks are SHAC's (``networks.Actor`` / ``Critic``: Linear-ELU-LayerNorm blocks)
    so that run.pt exports unchanged; the policy is a Gaussian over the pre-tanh action (the env applies
    tanh, as SHAC's actor does), with a learned state-independent std. ``algo="ppo"`` runs also default
    ``env.num_envs`` to ``num_envs`` and ``runner.iterations`` to ``iterations`` (``ppo_defaults``).
    """

    num_envs: int = 4096
    """Parallel environments (paper: 4096)."""
    iterations: int = 3000
    """PPO iterations (paper: 3000; 4096 x 24 x 3000 = 295 M env steps)."""
    num_steps_per_env: int = 24
    """Rollout length per iteration (control steps)."""
    learning_rate: float = 1e-3
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    """Adaptive: the rate is divided / multiplied by 1.5 when the KL leaves [KL*/2, 2 KL*] (rsl_rl)."""
    desired_kl: float = 0.01
    """KL* of the adaptive schedule."""
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    entropy_coef: float = 0.0
    value_loss_coef: float = 1.0
    use_clipped_value_loss: bool = True
    max_grad_norm: float = 1.0
    gamma: float = 0.99
    lam: float = 0.95
    """GAE lambda."""
    init_std: float = 0.3
    """Initial policy std (pre-tanh), learned per action."""
    actor_hidden: tuple[int, ...] = (512, 256, 128)
    """As SHAC's actor."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """As SHAC's critic."""
    normalize_obs: bool = True
    """Empirical observation normalisation (running mean / variance, ``normalizer.RunningNormalizer``)."""
    disc_updates_per_iter: int = 20
    """ADD discriminator steps per iteration (``add.updates_per_iter`` of PPO runs): one per PPO minibatch
    (5 x 4), each on ``add.batch_size`` residuals of the rollout and the replay. SHAC's one step per
    window would give the discriminator 48x fewer samples per env step at PPO's 98,304-step rollouts."""


@dataclass
class BCGCfg:
    """Bundled Contact Gradients (METHOD.md section 4; ``training/algorithms/bcg.py``); ``enabled=False``: SHAC."""

    enabled: bool = False
    """True: SHAC + BCG; False (default): plain SHAC. Off by default because plain SHAC at the paper's 128 envs
    was not worse than SHAC + BCG at its 64 on any of the four LAFAN1 motions, and better with sensor noise on
    three of them."""
    num_branches: int = 10
    """B."""
    horizon: int = 2
    """H control steps per bundle."""
    sigma_p: float = 0.01
    """Cartesian foot position perturbation std (m)."""
    sigma_v: float = 0.02
    """Cartesian foot velocity perturbation std (m/s)."""
    tau: float = 400.0
    """Trigger: per-foot normal force (N) above which a bundle starts."""
    damping: float = 1e-4
    """Damped pseudoinverse lambda."""
    max_dq: float | None = None
    """Per-joint clamp (rad) of the branch angle offsets dq = J+ dp: each perturbed leg hinge's offset is
    clamped element-wise to +/- max_dq after the pseudoinverse mapping (near a straight knee J+ maps 1 cm to
    tenths of a rad). None: no clamp (our default); an earlier version of the paper's parameter table lists
    |dq| <= 0.1 rad."""
    max_dqd: float | None = None
    """Per-joint clamp (rad/s) of the branch rate offsets dqd = J+ dv, as ``max_dq``. None: no clamp (our
    default); that earlier table lists |dqd| <= 0.5 rad/s."""


@dataclass
class RunnerCfg:
    """Loop, logging and checkpoints."""

    iterations: int = 1800
    """SHAC iterations (paper: 3000): the CPU-sized default of the deployable recipe (plain SHAC at 128 envs
    x horizon 32, on 2 ranks of a 2-core CPU); docs/results.md gives each motion's wall-clock."""
    save_every: int = 50
    """Write run.pt every K iterations (and at the end)."""
    keep_every: int = 300
    """Also keep run.pt as ``snapshots/run_<iteration>.pt`` every K iterations (0: never), to export,
    evaluate or branch from points along one schedule. Each is a whole checkpoint (a hard link when the
    file system allows one, so it costs no space until run.pt is next written)."""
    seed: int = 0
    device: str = "cpu"
    out_dir: str = "runs/dance"
    stop_at: int = 0
    """Stop (and save) after this iteration without changing the schedule; 0 = run all ``iterations``."""
    tensorboard: bool = True
    env_streams: int = 1
    """Random streams a single process splits its envs into (contiguous blocks). A data-parallel run gives
    each rank one stream of its own; a single process with ``env_streams`` = N reproduces the envs of an
    N-rank run exactly."""
    host_reduce: bool = True
    """Data-parallel ranks that all run on this machine's CPU sum their gradients through shared memory
    (/dev/shm; ``training.parallel.host_reduce``) instead of gloo's sockets; the same sums. False: gloo."""
    threads: int = 1
    """torch intra-op threads (0 = torch default). 1 by default: Warp's CPU kernels are single-threaded, so
    use one process per core; on a 2-core machine torch's default 2 threads make a training iteration 4x
    slower (they spin against the other process), with identical results."""
    tf32: bool = False
    """TF32 for CUDA matmuls and cuDNN. Pinned off by the trainer whatever the environment says
    (``training.device.configure_numerics``; METHOD.md: the actor, reward and simulator chain stays float32),
    and recorded here in config.yaml; ``validate`` refuses true."""
    deterministic: bool = False
    """Deterministic mode for checks (``bcgd train --deterministic``): torch's deterministic algorithms and,
    on CUDA, Warp's run-to-run deterministic atomics (slower; CPU runs are deterministic anyway)."""


@dataclass
class DebugCfg:
    """Fault injection for robustness tests."""

    inject_nan_iteration: int = -1
    """At this iteration, write NaN into env 0's simulator state mid-window (-1 = never)."""
    inject_nan_step: int = 1


@dataclass
class TrainConfig:
    robot: str = "g1"
    algo: Literal["shac", "ppo"] = "shac"
    """Training algorithm: SHAC through the differentiable simulator, or PPO (rsl_rl) forward-only."""
    motion: MotionCfg = field(default_factory=MotionCfg)
    sim: SimCfg = field(default_factory=SimCfg)
    env: EnvCfg = field(default_factory=EnvCfg)
    domain_rand: DomainRandCfg = field(default_factory=DomainRandCfg)
    add: ADDCfg = field(default_factory=ADDCfg)
    shac: SHACCfg = field(default_factory=SHACCfg)
    ppo: PPOCfg = field(default_factory=PPOCfg)
    bcg: BCGCfg = field(default_factory=BCGCfg)
    runner: RunnerCfg = field(default_factory=RunnerCfg)
    debug: DebugCfg = field(default_factory=DebugCfg)

    def validate(self) -> TrainConfig:
        """Raise BcgdError on values no run can use (one line naming the key); return self."""
        checks = [
            (self.env.num_envs >= 1, "env.num_envs must be >= 1"),
            (
                self.env.action_scale is None or 0 < self.env.action_scale < float("inf"),
                f"env.action_scale must be a positive number of rad or null, got {self.env.action_scale}",
            ),
            (
                0 < self.env.action_scale_factor < float("inf"),
                f"env.action_scale_factor must be a positive number, got {self.env.action_scale_factor}",
            ),
            (self.shac.horizon >= 1, "shac.horizon must be >= 1"),
            (self.runner.iterations >= 1, "runner.iterations must be >= 1"),
            (self.runner.save_every >= 1, "runner.save_every must be >= 1"),
            (self.runner.keep_every >= 0, "runner.keep_every must be >= 0 (0: keep no snapshots)"),
            (self.sim.kappa > 0, "sim.kappa must be > 0"),
            (self.sim.substeps >= 1, "sim.substeps must be >= 1"),
            (self.shac.num_critics >= 1, "shac.num_critics must be >= 1"),
            (0 < self.shac.gamma < 1, "shac.gamma must be in (0, 1)"),
            (0 <= self.shac.lam <= 1, "shac.lam must be in [0, 1]"),
            (self.shac.critic_minibatches >= 1, "shac.critic_minibatches must be >= 1"),
            (self.add.batch_size >= 2, "add.batch_size must be >= 2"),
            (self.motion.duration_s > 0, "motion.duration_s must be > 0"),
            (self.motion.csv is not None or self.motion.task in TASKS, f"motion.task must be one of {TASKS}"),
            (self.env.obs_profile in PROFILES, f"env.obs_profile must be one of {', '.join(PROFILES)}"),
            (
                self.env.obs_profile not in PROFILES
                or PROFILES[self.env.obs_profile].action_scale is None
                or self.env.action_scale in (None, PROFILES[self.env.obs_profile].action_scale),
                f"env.action_scale: profile {self.env.obs_profile} fixes it (its stack applies its own constant, "
                "not the exported one); leave env.action_scale and env.action_scale_factor unset",
            ),  # fmt: skip
            (not self.runner.tf32, "runner.tf32 must be false (METHOD.md: the gradient path stays float32)"),
            (self.env.adaptive_bin_s > 0, "env.adaptive_bin_s must be > 0 s"),
            (self.env.adaptive_kernel_bins >= 1, "env.adaptive_kernel_bins must be >= 1"),
            (0 < self.env.adaptive_decay <= 1, "env.adaptive_decay must be in (0, 1]"),
            (0 <= self.env.adaptive_uniform <= 1, "env.adaptive_uniform must be in [0, 1]"),
            (0 < self.env.adaptive_alpha <= 1, "env.adaptive_alpha must be in (0, 1]"),
            (0 <= self.env.first_frame_share <= 1, "env.first_frame_share must be in [0, 1]"),
            (
                0 <= self.domain_rand.reset_scale < float("inf"),
                f"domain_rand.reset_scale must be a number >= 0, got {self.domain_rand.reset_scale}",
            ),
        ]
        if self.algo == "ppo":
            p = self.ppo
            checks += [
                (p.num_steps_per_env >= 1, "ppo.num_steps_per_env must be >= 1"),
                (p.num_learning_epochs >= 1, "ppo.num_learning_epochs must be >= 1"),
                (p.num_mini_batches >= 1, "ppo.num_mini_batches must be >= 1"),
                (self.env.num_envs * p.num_steps_per_env >= p.num_mini_batches, "ppo: fewer samples than minibatches"),
                (p.init_std > 0, "ppo.init_std must be > 0"),
                (0 < p.gamma < 1, "ppo.gamma must be in (0, 1)"),
                (not self.bcg.enabled, "bcg: bundled contact gradients are a SHAC method; PPO uses no gradients"),
                (not self.env.adaptive_start, "env.adaptive_start: not built for ppo (SHAC's runner updates it)"),
            ]
        for ok, msg in checks:
            if not ok:
                raise BcgdError(msg)
        if self.bcg.enabled:
            check_bcg_cfg(self.bcg)
        check_values(self)  # every other number: finite, within its bound (config_checks)
        return self


BCG_NUM_ENVS = 64
"""SHAC + BCG envs unless given: the paper's batch for the bundled method (plain SHAC: ``EnvCfg.num_envs``)."""


def bcg_defaults(cfg: TrainConfig) -> TrainConfig:
    """A SHAC + BCG run gets the paper's BCG batch, ``BCG_NUM_ENVS`` envs (in place; returns ``cfg``). The CLI
    applies it when ``--envs`` is not given, before ``cuda_defaults``."""
    if cfg.algo == "shac" and cfg.bcg.enabled:
        cfg.env.num_envs = BCG_NUM_ENVS
    return cfg


CUDA_NUM_ENVS = 2048
"""SHAC envs of a CUDA run unless given (64 fill a CPU core; a GPU needs thousands of threads per launch)."""


def cuda_defaults(cfg: TrainConfig) -> TrainConfig:
    """A SHAC run on CUDA: at least ``CUDA_NUM_ENVS`` envs (the CLI applies it when ``--envs`` is not given)."""
    if cfg.algo == "shac" and cfg.runner.device.startswith("cuda"):
        cfg.env.num_envs = max(cfg.env.num_envs, CUDA_NUM_ENVS)
    return cfg


def ppo_defaults(cfg: TrainConfig) -> TrainConfig:
    """Switch ``cfg`` to PPO with the paper's scale: ``algo="ppo"``, ``env.num_envs = ppo.num_envs``,
    ``runner.iterations = ppo.iterations``, ``add.updates_per_iter = ppo.disc_updates_per_iter`` (in place;
    returns ``cfg``)."""
    cfg.algo = "ppo"
    cfg.bcg.enabled = False  # bundling is a SHAC method
    cfg.env.adaptive_start = False  # SHAC's runner feeds the start sampler
    cfg.env.num_envs = cfg.ppo.num_envs
    cfg.runner.iterations = cfg.ppo.iterations
    cfg.add.updates_per_iter = cfg.ppo.disc_updates_per_iter
    return cfg


# ---------------------------------------------------------------------------------------------
# plain-value round trip and overrides


def to_dict(cfg: Any) -> dict:
    """A dataclass config as nested plain dicts (tuples become lists)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


def from_dict(d: dict, cls: type = TrainConfig) -> Any:
    """Rebuild a config from ``to_dict`` output; unknown keys raise BcgdError."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in d.items():
        if key not in hints:
            raise BcgdError(f"config key {cls.__name__}.{key} is unknown")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = from_dict(value, tp)
        else:
            kwargs[key] = _coerce(value, tp, key)
    return cls(**kwargs)


def apply_overrides(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``a.b=v`` strings in place (v parsed by the field's type; tuples as ``1,2``)."""
    for item in overrides:
        if "=" not in item:
            raise BcgdError(f"--set {item!r}: expected KEY=VALUE, e.g. shac.actor_lr=1e-3")
        path, raw = item.split("=", 1)
        parts = path.strip().split(".")
        obj = cfg
        for p in parts[:-1]:
            if not dataclasses.is_dataclass(obj) or not hasattr(obj, p):
                raise BcgdError(f"--set {path}: unknown config key (see config.yaml of a run for the keys)")
            obj = getattr(obj, p)
        name = parts[-1]
        hints = typing.get_type_hints(type(obj)) if dataclasses.is_dataclass(obj) else {}
        if name not in hints or dataclasses.is_dataclass(hints[name]):
            raise BcgdError(f"--set {path}: unknown config key (see config.yaml of a run for the keys)")
        setattr(obj, name, _parse(raw.strip(), hints[name], path))
    return cfg


def _parse(raw: str, tp: Any, path: str) -> Any:
    """Parse a command-line string into type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() in ("none", "null", "") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _parse(raw, inner[0], path)
    if origin is tuple:
        items = [s for s in raw.strip("()[] ").split(",") if s.strip()]
        elem = args[0]
        if args[-1] is not Ellipsis and len(items) != len(args):
            raise BcgdError(f"--set {path}={raw}: expected {len(args)} comma-separated values")
        return tuple(_parse(s.strip(), elem, path) for s in items)
    if origin is Literal:
        if raw not in args:
            raise BcgdError(f"--set {path}={raw}: expected one of {', '.join(map(str, args))}")
        return raw
    try:
        if tp is bool:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            return int(raw)
        if tp is float:
            return float(raw)
        if tp is str:
            return raw
    except ValueError:
        raise BcgdError(f"--set {path}={raw}: expected {tp.__name__}") from None
    raise BcgdError(f"--set {path}: unsupported type {tp}")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert a plain value (from to_dict) back to the field type (lists to tuples)."""
    origin = typing.get_origin(tp)
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def training_robot(cfg: TrainConfig) -> RobotSpec:
    """The robot a run trains: the packaged ``cfg.robot`` with ``env.action_scale`` (when set) or its own
    per-joint scale times ``env.action_scale_factor``, then the default pose and action scale the observation
    profile fixes (``ObsProfile.pin``: a stack that applies its own constants, e.g. holosoma)."""
    robot = load_robot(cfg.robot)
    if cfg.env.action_scale is not None:
        robot = robot.with_action_scale(cfg.env.action_scale)
    else:
        robot = robot.with_action_scale(robot.action_scale * cfg.env.action_scale_factor)
    return PROFILES[cfg.env.obs_profile].pin(robot) if cfg.env.obs_profile in PROFILES else robot
