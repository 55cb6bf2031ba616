"""The learners: ``shac`` (Short-Horizon Actor-Critic through the differentiable simulator) and ``bcg``
(Bundled Contact Gradients: SHAC's transition with bundled, perturbed contact branches)."""
