"""The SHAC training run: build env + SHAC + ADD from a ``TrainConfig``, iterate, log, checkpoint, resume.

``Trainer(cfg, resume=None, on_iteration=None).run() -> TrainResult`` is what ``training.run.train`` (the
library call behind ``bcgd train``) runs for SHAC. Each iteration: linear learning-rate decay, one
differentiable SHAC window (``SHAC.rollout``), the actor step, the critic (TD(lambda), ensemble, Polyak
target), the running normalisers, the discriminator step; then metrics to ``metrics.jsonl`` / TensorBoard and the
``on_iteration`` callback (the CLI's rich progress). ``run.pt`` is written atomically every
``runner.save_every`` iterations and at the end, never from a non-finite model (the refusal is logged
in ``events.jsonl``), and kept as ``snapshots/run_<iteration>.pt`` every ``runner.keep_every``. A run
resumed from ``run.pt`` continues bit-exactly on CPU: the checkpoint holds the env state, replay buffer,
optimisers, normalisers and every RNG state.

Data-parallel (``training.parallel.distributed``): the same ``Trainer`` runs on every rank with its share of the
envs; rank 0 alone writes run.pt, metrics.jsonl, TensorBoard and calls ``on_iteration``. The checkpoint
holds the whole run's env state, so it resumes at any world size (the envs re-split; bit-exact only at the
same world size). Ctrl-C (SIGINT) on any rank stops every rank at the next iteration boundary, saved.
"""

from __future__ import annotations

import collections
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from bcg_deploy import motions
from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.motions.motion import Motion
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.algorithms.bcg import BundledTransition
from bcg_deploy.training.algorithms.shac import EVENTS, SHAC
from bcg_deploy.training.config import MotionCfg, TrainConfig, to_dict, training_robot
from bcg_deploy.training.device import configure_numerics, resolve_device
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv, SimTransition, Transition
from bcg_deploy.training.logger import MetricsLogger, episode_metrics, plot_learning_curve
from bcg_deploy.training.parallel.distributed import (
    STOP_SIGNAL,
    StopRequest,
    World,
    launched_rank,
    merge_env_states,
    split_env_state,
)
from bcg_deploy.training.parallel.syncs import first_true
from bcg_deploy.training.rng import EnvRandom, even_split, shard_seed
from bcg_deploy.training.run_files import (
    CHECKPOINT_NAME,
    keep_snapshot,
    load_resume_checkpoint,
)

EPISODE_WINDOW = 100


@dataclass
class TrainResult:
    run_dir: Path
    checkpoint: Path | None
    iteration: int
    metrics: dict
    events: list[dict] = field(default_factory=list)


def load_motion(mcfg: MotionCfg, robot) -> Motion:  # noqa: ANN001
    """The reference clip of a config: a task name or a LAFAN1-format CSV window."""
    if mcfg.csv:
        path = Path(mcfg.csv)
        if not path.is_file():
            raise BcgdError(f"motion file {path} not found (expected a LAFAN1-format G1 CSV)")
        return motions.load_lafan1_csv(path, mcfg.start_s, mcfg.duration_s, robot)
    return motions.load_task_motion(mcfg.task)


def _device(name: str) -> torch.device:
    return resolve_device(name)  # one "cuda:N" for torch and Warp


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - legacy global, restored by checkpoint.restore_rng
    torch.manual_seed(seed)


class Trainer:
    """Owns one run's objects; ``run()`` iterates to ``runner.iterations`` (or ``stop_at``)."""

    def __init__(
        self,
        cfg: TrainConfig,
        resume: Path | None = None,
        motion: Motion | None = None,
        sim: Any = None,
        on_iteration: Callable[[dict], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
        world: World | None = None,
    ) -> None:
        self.robot = training_robot(cfg)
        ckpt = None
        if resume is not None:
            ckpt = load_resume_checkpoint(resume, self.robot)
            motion = ckpt_io.motion_from_checkpoint(ckpt)
        cfg.validate()
        self.cfg = cfg
        self.device = _device(cfg.runner.device)
        self.numerics = configure_numerics(self.device, cfg.runner.tf32, cfg.runner.deterministic)
        if cfg.runner.threads > 0:
            torch.set_num_threads(cfg.runner.threads)
        self.world = w = world if world is not None else World(env_sizes=[cfg.env.num_envs])
        if w.total_envs != cfg.env.num_envs:
            raise BcgdError(f"the ranks' envs {w.env_sizes} do not add up to env.num_envs {cfg.env.num_envs}")
        seed = cfg.runner.seed
        seed_everything(seed)  # the same network initialisation on every rank
        self.motion = motion if motion is not None else load_motion(cfg.motion, self.robot)
        dtype = torch.float64 if cfg.sim.dtype == "float64" else torch.float32
        if w.distributed:
            rng = EnvRandom(seed, [w.local_envs], first_shard=w.rank, device=self.device)
        else:
            rng = EnvRandom(seed, even_split(w.local_envs, max(cfg.runner.env_streams, 1)), device=self.device)
        self.env = ImitationEnv(
            cfg, self.robot, self.motion, sim=sim, device=self.device, num_envs=w.local_envs, rng=rng
        )
        self.env.transition = build_transition(cfg, self.env, seed=shard_seed(seed, w.rank) + 0xBC6)
        self.add = ADD(self.env.feature_dim, cfg.add, world=w).to(self.device, dtype)
        self.env.add = self.add
        critic_dim = None if self.env.critic_module is None else self.env.critic_obs_dim
        self.shac = SHAC(
            cfg.shac,
            self.env.obs_dim,
            self.env.num_actions,
            w.local_envs,
            world=w,
            seed=seed,
            critic_obs_dim=critic_dim,
        )
        self.shac.to(self.device, dtype)
        w.broadcast_params_([*self.shac.parameters(), *self.add.disc.parameters()])
        torch.manual_seed(shard_seed(seed, w.rank) + 1)  # this rank's own stream (discriminator batches)
        self.run_dir = Path(cfg.runner.out_dir)
        self.iteration = 0
        self.episode_len: collections.deque = collections.deque(maxlen=EPISODE_WINDOW)
        self.episode_return: collections.deque = collections.deque(maxlen=EPISODE_WINDOW)
        self.events: list[dict] = []
        self.on_iteration = on_iteration
        self.on_event = on_event
        self.last_metrics: dict = {}
        if ckpt is not None:
            self._restore(ckpt)
        else:
            self.env.reset()
        self.logger = None
        if w.is_main:
            self.logger = MetricsLogger(
                self.run_dir, cfg.runner.tensorboard, resume_iteration=self.iteration if ckpt is not None else None
            )
            self._write_config()
        self._stop = StopRequest()
        missing = [k for k, ok in self.env.sim_params_applied.items() if not ok and k != "joint_friction"]
        if cfg.domain_rand.enabled and missing and ckpt is None:
            self._event("domain_rand", f"not applied (the simulator rejected them): {', '.join(missing)}")

    # ------------------------------------------------------------------ checkpoint

    def _write_config(self) -> None:
        text = yaml.safe_dump(to_dict(self.cfg), sort_keys=False)
        atomic_write_bytes(self.run_dir / "config.yaml", text.encode(), what="the run's config")

    def _rank_state(self) -> dict:
        """What this rank contributes to run.pt (its envs, return accumulators, replay and streams)."""
        return {
            "env_state": ckpt_io.plain(self.env.state_dict()),
            "ret": self.shac.ret.detach().cpu().clone(),
            "add_replay": ckpt_io.plain(self.add.replay.state_dict()),
            "rng": ckpt_io.capture_rng(),
        }

    def payload(self, ranks: list[dict] | None = None) -> dict:
        """The run.pt dict (checkpoint schema + the training state needed for an exact resume).

        ``ranks``: every rank's ``_rank_state()`` in rank order (default: this process alone)."""
        ranks = ranks if ranks is not None else [self._rank_state()]
        cfg_plain = to_dict(self.cfg)
        cfg_plain["sim"]["control_dt"] = self.env.control_dt
        p = ckpt_io.build_checkpoint(
            robot=self.robot,
            motion=self.motion,
            observation=self.env.obs_module,
            config=cfg_plain,
            actor=self.shac.actor,
            obs_normalizer=self.shac.obs_normalizer,
            critics=self.shac.critic.member_state_dicts(),
            target_critics=self.shac.target_critic.member_state_dicts(),
            discriminator=self.add.disc,
            add_normalizer=self.add.norm,
            optimizers={
                "actor": self.shac.actor_optimizer,
                "critic": self.shac.critic_optimizer,
                "discriminator": self.add.optimizer,
            },
            iteration=self.iteration,
            metrics={k: v for k, v in self.last_metrics.items() if isinstance(v, (int, float))},
            rng=ranks[0]["rng"],
        )
        p["env_state"] = merge_env_states([r["env_state"] for r in ranks])
        p["add_replay"] = ranks[0]["add_replay"]
        p["world"] = {"size": self.world.size, "env_sizes": list(self.world.env_sizes)}
        p["ranks"] = [{"add_replay": r["add_replay"], "rng": r["rng"]} for r in ranks]
        p["shac_state"] = {
            "ret": torch.cat([r["ret"] for r in ranks]),
            "minibatch_generator": self.shac.minibatch_generator.get_state(),
            "ret_normalizer": ckpt_io.plain(self.shac.ret_normalizer.state_dict()),
            "counters": dict(self.shac.counters),
        }
        if self.shac.critic_obs_normalizer is not None:
            p["critic_obs_normalizer"] = ckpt_io.plain(self.shac.critic_obs_normalizer.state_dict())
        p["episode_history"] = {"len": list(self.episode_len), "return": list(self.episode_return)}
        p["sim_params_applied"] = dict(self.env.sim_params_applied)
        return p

    def save(self) -> Path | None:
        """Write run.pt atomically unless the model is non-finite (then log and keep the old file).

        Collective in a data-parallel run (every rank sends its state; rank 0 writes)."""
        path = self.run_dir / CHECKPOINT_NAME
        ranks = self.world.gather_object(self._rank_state()) if self.world.distributed else None
        if not self.world.is_main:
            return None
        if not self.shac.parameters_finite():
            self._event("checkpoint_refused", f"model has non-finite values at iteration {self.iteration}; kept {path}")
            return None
        try:
            ckpt_io.save_checkpoint(path, self.payload(ranks))
        except ckpt_io.NonFiniteCheckpointError as exc:
            self._event("checkpoint_refused", str(exc))
            return None
        return path

    def _keep(self, run_pt: Path) -> None:
        try:
            keep_snapshot(run_pt, self.iteration)
        except OSError as exc:  # run.pt is written; a missing snapshot must not end the run
            self._event("snapshot_failed", f"could not keep iteration {self.iteration}'s snapshot: {exc}")

    def _restore(self, ck: dict) -> None:
        spec = self.env.obs_module.spec()
        if ckpt_io.plain(spec) != ck["observation"]:
            raise BcgdError("checkpoint observation layout differs from this version's 849-dim observation")
        dev = self.device
        s = self.shac
        w = self.world
        stored = ck.get("world", {"size": 1})
        ranks = ck.get("ranks") or [{"add_replay": ck["add_replay"], "rng": ck["rng"]}]
        same_split = int(stored["size"]) == w.size and len(ranks) == w.size
        try:
            s.actor.load_state_dict(ck["actor"])
            s.obs_normalizer.load_state_dict(ck["obs_normalizer"])
            if s.critic_obs_normalizer is not None:
                s.critic_obs_normalizer.load_state_dict(ck["critic_obs_normalizer"])
            s.critic.load_member_state_dicts(ck["critics"])
            s.target_critic.load_member_state_dicts(ck["target_critics"])
            s.load_actor_optimizer_state(_optimizer_state(ck["optimizers"]["actor"]))
            s.load_critic_optimizer_state(_optimizer_state(ck["optimizers"]["critic"]))
            self.add.disc.load_state_dict(ck["discriminator"])
            self.add.norm.load_state_dict(ck["add_normalizer"])
            self.add.optimizer.load_state_dict(_optimizer_state(ck["optimizers"]["discriminator"]))
            self.add.replay.load_state_dict(ranks[w.rank % len(ranks)]["add_replay"])
            st = ck["shac_state"]
            lo = w.env_offset
            ret = st["ret"]
            if ret.shape[0] != w.total_envs:
                raise ValueError(f"stored returns cover {ret.shape[0]} envs, this run has {w.total_envs}")
            s.ret.copy_(ret[lo : lo + w.local_envs].to(dev))
            s.ret_normalizer.load_state_dict(st["ret_normalizer"])
            s.counters.update({k: int(v) for k, v in st["counters"].items()})
            if "minibatch_generator" in st:
                s.minibatch_generator.set_state(st["minibatch_generator"])
            env_state = split_env_state(ck["env_state"], w.env_sizes, w.rank)
            if env_state.get("rng", {}).get("sizes") != self.env.rng.sizes:
                env_state.pop("rng", None)  # another split of the streams: continue on fresh ones
            self.env.load_state_dict(env_state)
        except (KeyError, RuntimeError, ValueError) as exc:
            msg = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise BcgdError(f"checkpoint does not match this configuration ({msg})") from None
        self.add.to(dev)
        self.shac.to(dev)
        self.iteration = int(ck["iteration"])
        self.episode_len.extend(ck["episode_history"]["len"])
        self.episode_return.extend(ck["episode_history"]["return"])
        self.last_metrics = dict(ck.get("metrics", {}))
        if same_split:
            ckpt_io.restore_rng(ranks[w.rank]["rng"])
        else:  # a new world size: fresh per-rank streams, distinct from the ones of the first iterations
            torch.manual_seed(shard_seed(self.cfg.runner.seed + self.iteration, w.rank) + 1)

    # ------------------------------------------------------------------ loop

    def _event(self, kind: str, message: str, **extra: Any) -> None:
        e = {"iteration": self.iteration, "event": kind, "message": message, **extra}
        self.events.append(e)
        if getattr(self, "logger", None) is not None:
            self.logger.event(self.iteration, kind, message)
        if self.on_event is not None and self.world.is_main:
            self.on_event(e)

    def step(self) -> dict:
        """One SHAC iteration; returns its metrics."""
        cfg = self.cfg
        it = self.iteration
        t0 = time.perf_counter()
        a_lr, c_lr = self.shac.set_learning_rate(it, cfg.runner.iterations)
        if it == cfg.debug.inject_nan_iteration:
            self.env.inject_nan(cfg.debug.inject_nan_step)
            self._event("nan_injected", f"debug: NaN written into env 0's state at step {cfg.debug.inject_nan_step}")
        roll = self.shac.rollout(self.env)
        actor_stats = self.shac.update_actor(roll.actor_loss)
        roll.actor_loss = roll.actor_loss.detach()
        critic_stats = self.shac.update_critic(roll)
        self.shac.update_normalizers(roll)
        nan = torch.full_like(roll.deltas, float("nan"))
        disc_stats = self.add.update(torch.where(roll.valid[..., None], roll.deltas, nan))  # ADD drops NaN rows
        self.iteration = it + 1
        host = self.shac.read_iteration(  # the iteration's values on the device, read in one host sync
            {
                "window": self._window_tensors(roll),
                "critic": critic_stats,
                "action_std": self.shac.actor.std.detach().mean(),
                "reward_scale": self.shac.reward_scale(),
            }
        )
        critic_stats = host["critic"]
        st = self._reduce_window(roll, host["window"])
        sampler = self.env.start_sampler
        if sampler is not None:
            sampler.update(st["start_failures"])  # every rank folds in the same sum: one distribution
        dt = time.perf_counter() - t0
        self.episode_len.extend(st["episode_len"])
        self.episode_return.extend(st["episode_return"])
        if st["diverged"]:
            self._event("diverged_envs", f"{st['diverged']} env-steps non-finite or exploding: reset, contributed 0")
        if actor_stats.get("actor_skipped"):
            self._event("actor_update_skipped", "non-finite actor loss or gradient norm: update skipped")
        if actor_stats.get("actor_nan_grad_tensors"):
            self._event("nan_gradients_zeroed", f"{int(actor_stats['actor_nan_grad_tensors'])} actor tensors")
        n_steps = cfg.env.num_envs * cfg.shac.horizon
        m = {
            "iteration": self.iteration,
            "time_s": dt,
            "iterations_per_s": 1.0 / dt,
            "env_steps_per_s": n_steps / dt,
            "reward": st["reward"],
            "reward_add": st["reward_add"],
            "reward_action_rate": st["reward_action_rate"],
            "reward_self_collision": st["reward_self_collision"],
            "tracking_error_cm": st["tracking_error_cm"],
            **episode_metrics(st, self.episode_len, self.episode_return),
            "action_std": host["action_std"],
            "actor_lr": a_lr,
            "critic_lr": c_lr,
            "reward_scale": host["reward_scale"],
            **actor_stats,
            **critic_stats,
            **disc_stats,
            **{f"count_{k}": v for k, v in self.shac.counters.items()},
        }
        if self.world.distributed:
            m["world_size"] = self.world.size
        if st["foot_force_max"] is not None:
            m["foot_force_max"] = st["foot_force_max"]
        if sampler is not None:  # how many times the favourite start bin is drawn more than uniformly
            m["start_focus"] = sampler.focus()
        m.update(st["transition"])  # e.g. BCG: bcg_starts, bcg_sim_rows, ... summed over the window and ranks
        if "bcg_sim_rows" in m:
            m["bcg_row_overhead"] = m["bcg_sim_rows"] / n_steps - 1.0  # extra simulator rows per env-step
        self.last_metrics = m
        if self.logger is not None:
            self.logger.log(m)
        if self.on_iteration is not None and self.world.is_main:
            self.on_iteration(m)
        return m

    def _window_tensors(self, roll) -> dict:  # noqa: ANN001 - shac.Rollout
        """The window's statistics as device tensors (read with the iteration's other values): the sums, the
        event counts, the number of finished episodes and the last ``EPISODE_WINDOW`` of them (newest first,
        with a flag: fewer may have finished), a fixed size whatever the number of envs."""
        st = roll.stats
        track = torch.stack(st["tracking_error"]).double()
        finite = torch.isfinite(track)
        sum_t = roll.raw_rewards.double().sum()
        sums = torch.stack(
            [
                sum_t,
                torch.stack(st["reward_add"]).double().sum(),
                torch.stack(st["reward_action_rate"]).double().sum(),
                torch.stack(st["reward_self_collision"]).double().sum(),
                torch.where(finite, track, torch.zeros_like(track)).sum(),
                finite.sum().double(),
                torch.stack(st["foot_force"]).double().amax() if st["foot_force"] else torch.full_like(sum_t, -1.0),
            ]
        )
        done = roll.done.reshape(-1).flip(0)  # newest first (step-major order reversed)
        last = first_true(done, min(EPISODE_WINDOW, done.numel()))  # the newest finished ones, then others
        sampler = self.env.start_sampler
        return {
            "sums": sums,
            "start_failures": sampler.take_counts() if sampler is not None else [],
            "events": st["events"],
            "episodes": done.sum(),
            "recent_done": done[last],
            "recent_len": st["episode_len"].reshape(-1).flip(0)[last],
            "recent_return": st["episode_return"].reshape(-1).flip(0)[last],
        }

    def _reduce_window(self, roll, win: dict) -> dict:  # noqa: ANN001 - shac.Rollout
        """The window's statistics (``win``: ``_window_tensors`` read by the host) over every rank (one
        collective), plus the stop request of any rank."""
        st = roll.stats
        sums = win["sums"]
        recent = [i for i, d in enumerate(win["recent_done"]) if d][::-1]  # oldest first, as they ended
        local = {
            "sums": sums,
            "count": roll.raw_rewards.numel(),
            "counts": win["events"],
            "episodes": win["episodes"],
            "episode_len": [win["recent_len"][i] for i in recent],
            "episode_return": [win["recent_return"][i] for i in recent],
            "transition": {k: v for k, v in st["transition"].items() if isinstance(v, (int, float))},
            "stop": self._stop.requested,
            "start_failures": win["start_failures"],
        }
        parts = self.world.all_gather_object(local)
        tot = [sum(p["sums"][i] for p in parts) for i in range(6)]
        n = sum(p["count"] for p in parts)
        trans: dict = {}
        for p in parts:
            for k, v in p["transition"].items():
                trans[k] = trans.get(k, 0) + v
        force = max(p["sums"][6] for p in parts)
        self._stop.agree(any(p["stop"] for p in parts))  # not `requested`: one noted since it went out stays
        return {
            "reward": tot[0] / n,
            "reward_add": tot[1] / n,
            "reward_action_rate": tot[2] / n,
            "reward_self_collision": tot[3] / n,
            "tracking_error_cm": tot[4] / tot[5] * 100.0 if tot[5] > 0 else math.nan,
            "foot_force_max": force if st["foot_force"] else None,
            **{k: sum(p["counts"][i] for p in parts) for i, k in enumerate(EVENTS)},
            "episodes_done": sum(p["episodes"] for p in parts),
            "episode_len": [x for p in parts for x in p["episode_len"]],
            "episode_return": [x for p in parts for x in p["episode_return"]],
            "transition": trans,
            "start_failures": [sum(f) for f in zip(*(p["start_failures"] for p in parts), strict=True)],
        }

    def run(self) -> TrainResult:
        cfg = self.cfg.runner
        end = cfg.iterations if cfg.stop_at <= 0 else min(cfg.stop_at, cfg.iterations)
        existing = self.run_dir / CHECKPOINT_NAME
        saved: Path | None = existing if self.iteration >= end and existing.exists() else None
        previous = Trainer._catch_stop_signals(self)
        try:
            while self.iteration < end:
                self.step()
                if self._stop.due:  # any rank was interrupted: every rank saves and stops here
                    self._interrupted()
                    saved = self.save() or saved
                    break
                keep = cfg.keep_every > 0 and self.iteration % cfg.keep_every == 0
                if self.iteration % cfg.save_every == 0 or self.iteration == end or keep:
                    written = self.save()
                    saved = written or saved
                    if keep and written is not None:
                        self._keep(written)
        except KeyboardInterrupt:
            self._interrupted()
            saved = self.save() or saved
        finally:
            for signum, handler in previous.items():
                # a stop request after the last iteration has nothing left to stop; in a rank, the group's
                # late copy of the launcher's SIGINT neither (the launcher ends the ranks on a second Ctrl-C)
                signal.signal(signum, signal.SIG_IGN if launched_rank() or signum == STOP_SIGNAL else handler)
            if self.logger is not None:
                self.logger.close()
        if self.world.is_main:
            try:
                plot_learning_curve(self.run_dir)
            except Exception as exc:  # noqa: BLE001 - a plot must never fail a run
                self._event("plot_failed", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return TrainResult(self.run_dir, saved, self.iteration, self.last_metrics, self.events)

    def _interrupted(self) -> None:
        self._event("interrupted", f"stopped at iteration {self.iteration}; saving", signal=int(self._stop.signum))

    def _catch_stop_signals(self) -> dict:
        """Ctrl-C marks a stop request, acted on at the end of the iteration (agreed by every rank of a
        data-parallel run); a second Ctrl-C interrupts at once. A KeyboardInterrupt raised anywhere instead
        can land in a garbage-collection finalizer, which Python reports and swallows, and the run goes on
        (seen with SHAC + BCG). A second SIGINT within ``SAME_REQUEST_S`` is the same request. SIGTERM (a
        scheduler, ``timeout``, torchrun's agent) is a stop request too, however often it comes; in a rank of
        ``bcgd train --nproc N`` that is the launcher's ``STOP_SIGNAL`` instead (the launcher's own SIGTERM
        must end its ranks), and SIGINT asks only once: the launcher judges a second Ctrl-C and then ends the
        ranks. A rank cannot judge it: a handler runs when the main thread is back from C (a collective that
        waits seconds for a slower peer), so the group's copy of ``timeout -s INT`` can be handled long after
        the launcher's request, even after the save (raising KeyboardInterrupt there would end the rank as if
        nothing had been saved). After the run a rank ignores both. The "interrupted" event records the signal.
        Only in the main thread (signals cannot be caught elsewhere): {signal: previous handler}."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def request_stop(signum, frame) -> None:  # noqa: ANN001
            if self._stop.note(signum):
                raise KeyboardInterrupt

        def request_stop_once(signum, frame) -> None:  # noqa: ANN001
            self._stop.note(signal.SIGINT if signum == STOP_SIGNAL else signum)

        if launched_rank():  # the launcher tells a second request from the same one, and ends the ranks itself
            return {s: signal.signal(s, request_stop_once) for s in (signal.SIGINT, STOP_SIGNAL)}
        return {
            signal.SIGINT: signal.signal(signal.SIGINT, request_stop),
            signal.SIGTERM: signal.signal(signal.SIGTERM, request_stop_once),
        }


def build_transition(cfg: TrainConfig, env: ImitationEnv, seed: int | None = None) -> Transition:
    """Plain SHAC physics, or ``bcg.BundledTransition(cfg.bcg, env, seed)`` when ``cfg.bcg.enabled``."""
    if not cfg.bcg.enabled:
        return SimTransition(env.sim)
    return BundledTransition(cfg.bcg, env, seed=seed)


def _optimizer_state(sd: dict) -> dict:
    """An optimizer state dict as stored by ``checkpoint.plain`` (str keys) back to torch's int keys."""
    return {**sd, "state": {int(k): v for k, v in sd["state"].items()}}
