"""Rotation and quaternion maths, one module per array backend; quaternions are w x y z everywhere.

- ``quat_numpy``: numpy (motions, export constants and parity inputs, sim2sim).
- ``quat_torch``: torch, batched and differentiable (observations, training, the exported graphs).
- Warp: ``bcg_deploy.diffsim.math`` builds the ``@wp.func`` versions per precision, with the kernels that
  call them.

Nothing here imports another part of the package: every stage may use it.
"""
