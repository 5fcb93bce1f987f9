"""Every family's tiny random checkpoint opens with `mlx_lm.load` and generates.

Run: `pytest tests/checkpoint/test_random_models.py`. Also checks that routing is not degenerate (different
tokens pick different experts) and that unknown families give the one-line error. Loading and
generating is checked here for the first families, float and 4-bit; tests/checkpoint/test_families.py runs
every family make-random builds through mlx-lm and through specdec.
"""

from __future__ import annotations

import json

import mlx.core as mx
import mlx_lm
import pytest
from transformers import AutoTokenizer

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import SpecdecError
from tests.helpers import fast_cases

FIRST = ["deepseek_v3", "deepseek_v32", "glm4_moe", "minimax", "mixtral", "qwen2_moe", "qwen3_moe"]


@pytest.mark.parametrize("bits", [None, 4])
@pytest.mark.parametrize("family", fast_cases(FIRST))
def test_loads_and_generates(family, bits, tmp_path):
    out = make_random(family, tmp_path / family, bits=bits, seed=3)
    config = json.loads((out / "config.json").read_text())
    model, tokenizer = mlx_lm.load(str(out))
    assert tokenizer.vocab_size == config["vocab_size"]
    assert (config.get("quantization") or {}).get("bits") == bits
    text = mlx_lm.generate(model, tokenizer, "def add(a, b):", max_tokens=8)
    assert len(tokenizer.encode(text, add_special_tokens=False)) >= 1
    logits = model(mx.array([tokenizer.encode("import os\nprint(x)")]))
    assert bool(mx.isfinite(logits).all())


def test_routing_varies_across_tokens(tmp_path):
    """Random routers and correction biases: tokens must not all pick the same experts."""
    out = make_random("deepseek_v3", tmp_path / "m", seed=0)
    model, tokenizer = mlx_lm.load(str(out))
    layer = model.model.layers[1]
    h = model.model.embed_tokens(mx.array(tokenizer.encode("for i in range(10): print(i)")))
    inds, _ = layer.mlp.gate(layer.post_attention_layernorm(h))  # [T, k]
    picked = {tuple(sorted(row)) for row in inds.tolist()}
    assert len(picked) > 1
    assert float(mx.abs(layer.mlp.gate.e_score_correction_bias).sum()) > 0


def test_tokenizer_loads_with_transformers(tmp_path):
    out = make_random("mixtral", tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = tok.encode("return self.value")
    assert tok.decode(ids) == "return self.value"


def test_same_seed_same_weights(tmp_path):
    a = make_random("mixtral", tmp_path / "a", seed=7)
    b = make_random("mixtral", tmp_path / "b", seed=7)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_unknown_family_lists_supported(tmp_path):
    with pytest.raises(SpecdecError, match="supported: .*deepseek_v3"):
        make_random("llama", tmp_path / "x")


@pytest.mark.slow
def test_cli_make_random(tmp_path):
    from tests.store.test_store_errors import assert_user_error, specdec

    proc = specdec("make-random", "qwen3_moe", tmp_path / "q", "--quantize", "3", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    assert "3-bit" in proc.stdout
    assert json.loads((tmp_path / "q" / "config.json").read_text())["quantization"]["bits"] == 3
    assert_user_error(specdec("make-random", "llama", tmp_path / "x"), "supported:", "mixtral")
    assert_user_error(specdec("make-random", "mixtral", tmp_path / "x", "--quantize", "7"), "bits")
