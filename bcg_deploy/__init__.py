"""bcg-deploy: train deployable G1 motion-imitation policies with SHAC + Bundled Contact Gradients."""

__version__ = "0.1.0"
