"""Every config number is checked before anything runs (``training.config_checks``): one line naming the key,
exit 2, and no run folder made."""

from __future__ import annotations

import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TrainConfig, apply_overrides, ppo_defaults
from tests.cli.util import assert_one_line_error, bcgd_here

BAD = {
    "shac.actor_lr=nan": "shac.actor_lr must be a finite number > 0, got nan",
    "shac.actor_lr=-1": "shac.actor_lr must be > 0, got -1",
    "shac.critic_lr=nan": "shac.critic_lr must be a finite number > 0, got nan",
    "sim.physics_dt=0": "sim.physics_dt must be > 0, got 0",
    "sim.physics_dt=inf": "sim.physics_dt must be a finite number > 0, got inf",
    "sim.substeps=5": "sim.physics_dt x sim.substeps must be the control period 0.02 s",
    "add.lr=0": "add.lr must be > 0, got 0",
    "ppo.learning_rate=nan": "ppo.learning_rate must be a finite number > 0, got nan",
    "shac.betas=0.7,1": "shac.betas must be in [0, 1) (each), got (0.7, 1)",
    "shac.actor_hidden=0,64": "shac.actor_hidden must be >= 1 (each), got (0, 64)",
    "domain_rand.friction=1.2,0.3": "domain_rand.friction is a (low, high) range: low must be <= high",
    "domain_rand.push_lin_vel=0.5,nan,0.2": "domain_rand.push_lin_vel must be a finite number >= 0",
    "env.max_tracking_error=-0.1": "env.max_tracking_error must be > 0, got -0.1",
    "runner.seed=-1": "runner.seed must be in [0, 4294967295], got -1",
    "shac.target_alpha=1.5": "shac.target_alpha must be in [0, 1], got 1.5",
    "bcg.tau=nan": "bcg.tau must be a finite number, got nan",
}


@pytest.mark.parametrize("override", sorted(BAD))
def test_a_bad_value_is_one_line_naming_its_key(override):
    cfg = apply_overrides(TrainConfig(), [override])
    with pytest.raises(BcgdError) as err:
        cfg.validate()
    assert BAD[override] in str(err.value) and "\n" not in str(err.value)


def test_the_defaults_and_declared_exceptions_pass():
    TrainConfig().validate()
    ppo_defaults(TrainConfig()).validate()
    apply_overrides(TrainConfig(), ["bcg.tau=inf", "env.max_tracking_error=none", "env.fall_height=-1"]).validate()


def test_every_numeric_field_has_a_rule():
    """A field added later gets a bound in BOUNDS or is declared free: no number goes unchecked."""
    from bcg_deploy.training.config_checks import BOUNDS, FREE, numeric_keys

    keys = set(numeric_keys(TrainConfig()))
    assert keys - set(BOUNDS) - FREE == set()
    assert (set(BOUNDS) | FREE) - keys == set()  # no rule for a field that is gone


@pytest.mark.parametrize(
    "override", ["shac.actor_lr=nan", "shac.actor_lr=-1", "shac.critic_lr=nan", "sim.physics_dt=0"]
)
def test_bcgd_train_refuses_before_making_a_folder(override, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    proc = bcgd_here("train", "dance", "--iterations", "1", "--envs", "8", "--nproc", "1", "--set", override,
                     capsys=capsys)  # fmt: skip
    assert_one_line_error(proc, BAD[override])
    assert list(tmp_path.iterdir()) == []  # no runs/ folder
