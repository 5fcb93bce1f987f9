"""One default per setting: the library's dataclasses hold it; the command line and Hydra's
schema read it from there, and conf/'s group defaults (YAML cannot import Python) are held equal.

    pytest tests/cli/test_defaults.py
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from experiments.config import register, to_config
from specdec.cache.spec import PolicySpec
from specdec.checkpoint.bundled import DEFAULT_MODEL, DEFAULT_PROMPT
from specdec.cli.generate import add_arguments
from specdec.clock.profiles import DEFAULT_PROFILE
from specdec.core.units import DEFAULT_BUDGET
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import DecodeConfig
from specdec.stream.config import StreamConfig

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_generate_options_default_to_the_library():
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    a = p.parse_args([])
    stream, decode = StreamConfig(), DecodeConfig()
    assert (a.model, a.prompt, a.budget) == (DEFAULT_MODEL, DEFAULT_PROMPT, DEFAULT_BUDGET)
    assert (a.policy, a.io, a.threads, a.lookahead) == (
        str(stream.policy),
        stream.io,
        stream.threads,
        stream.lookahead,
    )
    assert (a.drafter, a.gamma, a.max_tokens, a.temp, a.seed) == (
        str(DrafterSpec()),
        str(decode.gamma),
        decode.max_tokens,
        decode.temp,
        decode.seed,
    )


def test_hydra_group_defaults_are_the_library_defaults():
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        c = to_config(compose("config", overrides=["~experiment"]))
    stream, decode = StreamConfig(), DecodeConfig()
    assert c.model.path == DEFAULT_MODEL and c.prompt == DEFAULT_PROMPT
    assert c.device.profile == DEFAULT_PROFILE
    assert c.drafter_spec == DrafterSpec() and c.gamma == decode.gamma
    assert PolicySpec.parse(c.cache.policy) == stream.policy
    assert (c.model.io, c.model.threads, c.cache.lookahead) == (
        stream.io,
        stream.threads,
        stream.lookahead,
    )
    assert (c.temp, c.seed) == (decode.temp, decode.seed)
