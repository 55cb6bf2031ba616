"""Observation profiles: one declaration per profile, shared by training, export and sim2sim.

A pure package (numpy/torch only) below ``training/``: training builds the actor's observation from
it, export writes its term names into the ONNX metadata, and sim2sim builds the same observation from
the MuJoCo state by those names, as the deploy controller does, without importing ``training/``.

- ``PROFILES`` / ``get_profile(name)``: the declarations (``declarations.py``).
- ``terms.compute(profile, signals)``: the term maths of the deployable profiles (``terms.py``).
"""

from bcg_deploy.profiles.declarations import (
    DEFAULT_PROFILE as DEFAULT_PROFILE,
)
from bcg_deploy.profiles.declarations import (
    PROFILES as PROFILES,
)
from bcg_deploy.profiles.declarations import (
    ObsProfile as ObsProfile,
)
from bcg_deploy.profiles.declarations import (
    ObsTerm as ObsTerm,
)
from bcg_deploy.profiles.declarations import (
    get_profile as get_profile,
)
from bcg_deploy.profiles.declarations import (
    make_obs_terms as make_obs_terms,
)
from bcg_deploy.profiles.declarations import (
    profile_of_config as profile_of_config,
)
from bcg_deploy.profiles.declarations import (
    raw_noise as raw_noise,
)
