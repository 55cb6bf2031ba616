"""The imitation task the learners train on.

- ``imitation``: ``ImitationEnv`` (reference clip, simulator, rewards, terminations, resets).
- ``add``: the ADD discriminator reward and its features.
- ``domain_rand``: per-env physics and push randomisation.
- ``start_sampling``: where in the clip episodes start (uniform or adaptive).
- ``vec_env``: the env behind rsl_rl's ``VecEnv`` interface (PPO).
"""
