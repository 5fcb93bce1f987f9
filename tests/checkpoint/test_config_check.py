"""config.json is checked against the family's mlx-lm ModelArgs before a model is built.

Run: `pytest tests/checkpoint/test_config_check.py`. Every family's tiny config and every preset
pass; one wrong key fails with one line naming it, for families whose expert and top-k keys
differ (DeepSeek's n_routed_experts, Mixtral's num_local_experts, Qwen3's num_experts). The CLI
side (exit 2, the exact message) is in docs/errors.md's table.
"""

from __future__ import annotations

import re

import pytest

from specdec.checkpoint.config_check import check_config
from specdec.checkpoint.discover import model_classes
from specdec.checkpoint.families import TINY_FAMILIES, family_config
from specdec.checkpoint.presets import PRESETS, like_config
from specdec.core.errors import SpecdecError


def check(config: dict) -> None:
    check_config(config, model_classes(config)[1], "config.json")


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_tiny_family_passes(family):
    check(family_config(family))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_passes(preset):
    check(like_config(preset, 2))


@pytest.mark.parametrize(
    "family, edit, words",
    [
        (
            "deepseek_v3",
            {"num_experts_per_tok": 0},
            "`num_experts_per_tok` is 0, but it must be at least 1",
        ),
        ("mixtral", {"num_experts_per_tok": 9}, "above `num_local_experts`"),
        ("qwen3_moe", {"num_experts": -16}, "`num_experts` is -16"),
        ("qwen3_moe", {"hidden_size": 64.0}, "`hidden_size` is 64.0, not an integer"),
        ("mixtral", {"rope_theta": "abc"}, "`rope_theta` is 'abc', not a number"),
        ("deepseek_v3", {"max_position_embeddings": "big"}, "'big', not an integer"),
        ("deepseek_v3", {"quantization": "4bit"}, "`quantization` is '4bit', not an object"),
        ("deepseek_v3", {"quantization": {"bits": 4}}, "`quantization.group_size` is None"),
        ("deepseek_v3", {"hidden_size": None}, "`hidden_size` is None"),
        ("deepseek_v3", {"hidden_size": 10**30}, "must be below 2^31"),
        ("deepseek_v3", {"moe_layer_freq": 0}, "`moe_layer_freq` is 0"),
        ("deepseek_v3", {"rope_scaling": "x"}, "`rope_scaling` is 'x', not an object"),
        ("mixtral", {"rms_norm_eps": -1}, "`rms_norm_eps` is -1, but it must be above 0"),
        ("deepseek_v3", {"rope_theta": None}, "`rope_theta` is None, not a number"),
    ],
)
def test_one_wrong_key_named(family, edit, words):
    with pytest.raises(SpecdecError, match=re.escape(words)) as e:
        check({**family_config(family), **edit})
    assert "\n" not in str(e.value) and "restore" in str(e.value)


def test_missing_essential_key_named():
    config = family_config("deepseek_v3")
    del config["hidden_size"]
    with pytest.raises(SpecdecError, match="`hidden_size` missing"):
        check(config)


def test_none_is_a_family_default_for_other_keys():
    check({**family_config("mixtral"), "head_dim": None, "num_key_value_heads": None})
