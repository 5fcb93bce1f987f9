"""specdec-exp's configs, without running a sweep: every config composes into the typed Config,
every documented launcher composes, the schema refuses unknown keys and wrong types, job slugs
and config hashes, and bad task values are one-line errors before decoding.

    pytest tests/cli/test_experiments_config.py

The sweeps themselves: tests/e2e/test_experiments.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from experiments.config import Config, register, to_config
from experiments.jobs import config_hash
from experiments.run import slug
from experiments.tasks import get_task, task_names
from specdec.core.errors import SpecdecError
from specdec.gamma.spec import Gamma
from tests.helpers import fast_cases

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
# groups whose option leaves a value to the user (???): the value the test passes
REQUIRED = {
    "model/path": ["model.path=/models/x"],
    "drafter/draft": ["drafter.path=/models/small"],
    "cache/static": ["cache.hotlist=/profiles/hot.txt"],
    "device/file": ["device.profile=/profiles/mac.yaml"],
}


def _options() -> list:
    """(group, option) for every config; the fast loop composes the first option of each group."""
    return [
        (g.name, f.stem) if i == 0 else pytest.param(g.name, f.stem, marks=pytest.mark.slow)
        for g in sorted(CONF.iterdir())
        if g.is_dir()
        for i, f in enumerate(sorted(g.glob("*.yaml")))
    ]


@pytest.mark.parametrize(("group", "option"), _options())
def test_every_config_composes(group, option):
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        extra = REQUIRED.get(f"{group}/{option}", [])
        cfg = compose("config", [f"{group}={option}", *extra], return_hydra_config=True)
        typed = to_config(cfg)
    assert isinstance(typed, Config)
    if group == "experiment":  # a task module, or a probe of specdec/probes/ run as a task
        assert typed.task.name in task_names() and callable(get_task(typed.task.name))
    else:
        assert cfg.hydra.runtime.choices[group] == option


@pytest.mark.parametrize(
    "launcher", fast_cases(["basic", "joblib", "submitit_local", "submitit_slurm"])
)
def test_documented_launchers_compose(launcher):
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["hydra/launcher"] == launcher


def test_schema_rejects_unknown_keys_and_wrong_types():
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=["gama=4"])
        # γ is an int or "auto": any other text is refused when the typed config is made
        with pytest.raises(SpecdecError, match="gamma 'four'"):
            to_config(compose("config", overrides=["gamma=four"]))
        assert to_config(compose("config", overrides=["gamma=auto"])).gamma.auto
        assert to_config(compose("config", overrides=["gamma=3"])).gamma == Gamma(3)


def test_slug_and_hash():
    assert slug("drafter=oracle,model.path=/a b/c") == "drafter=oracle,model.path=_a_b_c"
    long_a, long_b = slug("model.path=" + "x" * 200 + "a"), slug("model.path=" + "x" * 200 + "b")
    assert len(long_a) <= 120 and long_a != long_b
    base = {"gamma": 2, "logger": {"mode": "offline"}, "sweep": "a"}
    same = {"gamma": 2, "logger": {"mode": "disabled"}, "sweep": "b"}
    assert config_hash(base) == config_hash(same)  # where it logs is not what it measures
    assert config_hash(base) != config_hash({**base, "gamma": 4})


def test_bad_trace_gammas_and_too_few_tokens_are_one_line_errors(tmp_path):
    """task.trace_gammas=[0], verify_form=exact and max_tokens=1 (no verify pass to measure) fail
    before decoding."""
    from types import SimpleNamespace

    from experiments.tasks._decode import decode
    from specdec.core.errors import SpecdecError

    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["task.trace_gammas=[0,2]"])
        with pytest.raises(SpecdecError, match=r"task.trace_gammas=\[0, 2\]: every γ must be >= 1"):
            to_config(cfg)
        cfg = compose("config", overrides=["verify_form=exact"])
        with pytest.raises(SpecdecError, match=r"^verify_form=exact: use decode or native$"):
            to_config(cfg)
        assert (
            to_config(compose("config", overrides=["verify_form=native"])).verify_form == "native"
        )
    with pytest.raises(SpecdecError, match="needs max_tokens >= 2"):
        decode(SimpleNamespace(max_tokens=1), None, tmp_path)
