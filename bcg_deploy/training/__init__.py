"""Training: SHAC (+ Bundled Contact Gradients) or PPO on the imitation task, through the differentiable simulator.

From Python (what ``bcgd train`` does; ``run``'s docstring has the resume example)::

    from bcg_deploy.training.run import plan_run, train

    cfg = plan_run("dance", iterations=2, envs=8, horizon=4, out="runs/notebook")
    result = train(cfg)  # result.checkpoint: runs/notebook/run.pt

Layout, by role:

- ``config`` (``TrainConfig``), ``config_checks`` (every value checked before a run), ``run`` (``plan_run``,
  ``claim_run_folder``, ``train``), ``run_files`` (run folders, run.pt, snapshots, resume points),
  ``progress`` (a run's header, progress and closing lines as text), ``runner`` (SHAC's ``Trainer``), ``ppo``
  (PPO's trainer, rsl_rl), ``evaluate``, ``checkpoint``, ``networks``, ``normalizer``, ``logger``, ``device``,
  ``rng``.
- ``env/``: the imitation task (``ImitationEnv``, ADD reward, domain randomisation, start sampling, the
  simulator glue, rsl_rl's ``VecEnv`` adapter).
- ``algorithms/``: SHAC and BCG.
- ``parallel/``: data-parallel ranks (``World``), their launch, gradient sums, host syncs.

The observation modules and their torch forward kinematics are ``bcg_deploy.observations`` (export uses them
too); nothing below imports the CLI.
"""
