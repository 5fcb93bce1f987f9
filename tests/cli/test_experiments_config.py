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
def test_every_config_composes(group, option, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)  # logger=wandb_online checks for a login
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
        # `+key=` adds a key Hydra cannot check: to_config names it and the valid ones (a
        # nested one was dropped silently, a top-level one raised OmegaConf's traceback)
        with pytest.raises(SpecdecError, match=r"unknown config key 'gama': .*did you mean gamma"):
            to_config(compose("config", overrides=["+gama=4"]))
        with pytest.raises(SpecdecError, match=r"'cache.polcy': cache has policy, budget"):
            to_config(compose("config", overrides=["+cache.polcy=lru"]))
        assert to_config(compose("config", overrides=["+task.options.x=1"])).task.options == {
            "x": 1
        }
        # γ is an int or "auto": any other text is refused when the typed config is made
        with pytest.raises(SpecdecError, match="gamma 'four'"):
            to_config(compose("config", overrides=["gamma=four"]))
        assert to_config(compose("config", overrides=["gamma=auto"])).gamma.auto
        assert to_config(compose("config", overrides=["gamma=3"])).gamma == Gamma(3)


def test_slug_and_hash():
    # a path is its basename and a hash: short, stable, and two of one basename stay apart
    a = slug("drafter=oracle,model.path=/tmp/nc/q3tiny")
    assert a == slug("drafter=oracle,model.path=/tmp/nc/q3tiny")
    assert a.startswith("drafter=oracle,model.path=q3tiny-") and "tmp" not in a
    assert a != slug("drafter=oracle,model.path=/other/q3tiny")
    assert slug("gamma=2,drafter.alpha=0.9") == "gamma=2,drafter.alpha=0.9"
    assert slug("prompt=a b?c") == "prompt=a_b_c"
    long_a, long_b = slug("prompt=" + "x" * 200 + "a"), slug("prompt=" + "x" * 200 + "b")
    assert len(long_a) <= 80 and long_a != long_b
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


def test_a_bad_budget_policy_or_logger_fails_before_a_job_writes(tmp_path, monkeypatch):
    """cache.budget=200% once failed only once the job had written config.json and started a
    wandb run for a job that never ran; the budget, the policy and the logger's mode (online
    needs a login) are now checked with the rest of the config, before the job's files."""
    register()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for override, message in (
            ("cache.budget=200%", "at most 100%"),
            ("cache.policy=fifo", "unknown cache policy 'fifo'"),
            ("logger=wandb_online", "wandb login"),
        ):
            with pytest.raises(SpecdecError, match=message):
                to_config(compose("config", overrides=[override]))


def test_experiment_files_say_what_they_change():
    """Each experiment file's header names every default it changes (a group it overrides, a
    top-level value it sets), so `experiment=union_cost` changes no budget silently."""
    import yaml

    for path in sorted((CONF / "experiment").glob("*.yaml")):
        text = path.read_text()
        header = " ".join(line for line in text.splitlines() if line.startswith("#"))
        assert "Changes from the" in header, f"{path.name}: no 'Changes from ...' line"
        body = yaml.safe_load(text)
        changed = [
            next(iter(d)).removeprefix("override /")
            for d in body.get("defaults", [])
            if isinstance(d, dict)
        ]
        for key, value in body.items():
            if key in ("defaults", "task", "sweep", "hydra"):
                continue
            changed += [f"{key}.{k}" for k in value] if isinstance(value, dict) else [key]
        for name in changed:
            assert name in header, f"{path.name}: sets {name} without saying so in its header"


def test_ad_hoc_sweeps_get_their_own_folder():
    """The main job's axes (γ, drafter) keep runs/sweeps/main; other keys name their own
    folder, unless `sweep=` names one."""
    from experiments.run import sweep_name

    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for overrides, want in (
            ([], "runs/sweeps/main"),
            (["gamma=8", "drafter=mtp"], "runs/sweeps/main"),
            (
                ["cache.budget=5%", "model=random_deepseek_v3"],
                "runs/sweeps/main+cache.budget,model",
            ),
            (["cache.budget=5%", "sweep=mine"], "runs/sweeps/mine"),
            (
                ["experiment=speedup_vs_acceptance", "drafter.alpha=0.5"],
                "runs/sweeps/speedup_vs_acceptance",
            ),
        ):
            cfg = compose("config", overrides, return_hydra_config=True)
            assert cfg.hydra.sweep.dir == want, overrides
    # a job sees its own values; the folder depends on the keys only
    assert sweep_name("main", ["cache.budget=5%", "gamma=2"]) == sweep_name(
        "main", ["cache.budget=9%"]
    )


def test_a_sweep_name_is_one_folder(tmp_path):
    """`sweep=../../../userproj2` once wrote into the user's folder: refused in the launching
    process before Hydra makes the sweep directory, and in every job's typed config."""
    from omegaconf import OmegaConf

    from experiments.callbacks import SweepReport

    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for bad in ("../../../userproj2", "..", "a/b", ".hidden"):
            with pytest.raises(SpecdecError, match="a sweep name is one folder name"):
                to_config(compose("config", overrides=[f"sweep={bad}"]))
        assert to_config(compose("config", overrides=["sweep=main-2.b"])).sweep
    sweep_dir = tmp_path / "runs" / "sweeps" / "../../userproj2"
    cfg = OmegaConf.create(
        {"sweep": "../../userproj2", "hydra": {"sweep": {"dir": str(sweep_dir)}}}
    )
    with pytest.raises(SystemExit, match="specdec-exp: error: sweep=../../userproj2: a sweep"):
        SweepReport().on_multirun_start(cfg)
    assert not any(tmp_path.iterdir())  # not even the sweep lock


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    import os
    import signal
    import time

    import experiments.run as run

    def interrupted() -> None:  # a real SIGINT while Hydra runs the job
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    monkeypatch.setattr(run, "ensure_fast_blas", lambda: None)  # no re-exec of pytest
    monkeypatch.setattr(run, "_hydra_main", interrupted)
    try:
        with pytest.raises(SystemExit) as exit_:
            run.main()
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C ended specdec-exp with a KeyboardInterrupt traceback")
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "specdec-exp: interrupted\n"
