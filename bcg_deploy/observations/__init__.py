"""The policy's observation as torch modules, shared by training, export and sim2sim checks.

- ``kinematics``: torch forward kinematics of a ``RobotSpec`` (batched, differentiable, ONNX-friendly).
- ``paper``: ``ObservationModule``, the 849-value observation of METHOD.md from raw state + reference clip.
- ``profile``: ``ProfileObservation``, a deployable profile's observation (``bcg_deploy.profiles``), and
  ``make_observation`` which picks the module for a profile name.

Below training in the data flow: export builds its graphs from these modules without importing training.
"""
