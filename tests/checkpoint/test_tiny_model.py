"""The shipped `tiny` model: mlx-lm opens it, its structure is the promised one, its MTP loads.

    pytest tests/checkpoint/test_tiny_model.py

Loads the real files in specdec/models/tiny (no random weights). The greedy continuation is
compared with the one the card recorded (training/card_tiny.py), so a changed checkpoint
or a changed loader shows up here.
"""

from __future__ import annotations

import json
import tokenize
from io import StringIO

import mlx.core as mx
import pytest
from mlx_lm import generate, load
from mlx_lm.models.switch_layers import QuantizedSwitchLinear

from specdec.checkpoint.bundled import BUNDLED, DEFAULT_MODEL, resolve_model
from specdec.checkpoint.mtp import MTPModule, load_mtp
from specdec.cli import main as cli_main
from specdec.core.errors import SpecdecError
from specdec.store.layout import MTP_FILE

TINY = BUNDLED["tiny"]


@pytest.fixture(scope="module")
def loaded():
    model, tokenizer = load(str(TINY))
    return model, tokenizer


@pytest.fixture(scope="module")
def card() -> dict:
    return json.loads((TINY / "card.json").read_text())


def test_bundled_names_and_default():
    assert DEFAULT_MODEL in BUNDLED
    assert resolve_model("tiny") == TINY
    assert resolve_model(str(TINY)) == TINY


def test_resolve_missing_path_names_it_and_the_bundled_models(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SpecdecError, match="nope.*does not exist.*tiny"):
        resolve_model(missing)


def test_models_cli_prints_bundled_json(capsys):
    assert cli_main(["models", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"tiny": str(TINY)}


def test_shipped_files_fit_the_size_limit():
    assert sum(f.stat().st_size for f in TINY.iterdir() if f.is_file()) <= 32 * 2**20


def test_structure_is_deepseek_v3_moe(loaded):
    model, _ = loaded
    a = model.args
    assert model.model_type == "deepseek_v3"
    assert (a.scoring_func, a.topk_method) == ("sigmoid", "noaux_tc")
    assert a.n_routed_experts >= 32 and a.num_experts_per_tok >= 4 and a.n_shared_experts == 1
    moe = [layer.mlp for layer in model.model.layers if hasattr(layer.mlp, "switch_mlp")]
    assert len(moe) >= 4 and len(moe) == a.num_hidden_layers - a.first_k_dense_replace
    for mlp in moe:
        proj = mlp.switch_mlp.gate_proj
        assert isinstance(proj, QuantizedSwitchLinear)
        assert (proj.num_experts, proj.bits, proj.group_size, proj.mode) == (
            a.n_routed_experts,
            4,
            64,
            "affine",
        )
        assert mlp.gate.e_score_correction_bias.shape == (a.n_routed_experts,)
        assert hasattr(mlp, "shared_experts")
    # The balance update moved the correction bias away from its zero init.
    assert any(float(mx.abs(m.gate.e_score_correction_bias).max()) > 0 for m in moe)


def test_mtp_weights_are_separate_with_deepseek_names():
    n = json.loads((TINY / "config.json").read_text())["num_hidden_layers"]
    main_keys = mx.load(str(TINY / "model.safetensors")).keys()
    assert not [k for k in main_keys if k.startswith(f"model.layers.{n}.")]
    keys = set(mx.load(str(TINY / MTP_FILE)).keys())
    p = f"model.layers.{n}."
    required = [p + s for s in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight")]
    required += [p + "eh_proj." + s for s in ("weight", "scales", "biases")]
    required += [p + "mlp.gate.weight", p + "mlp.gate.e_score_correction_bias"]
    required += [
        f"{p}mlp.switch_mlp.{m}.{s}"
        for m in ("gate_proj", "up_proj", "down_proj")
        for s in ("weight", "scales", "biases")
    ]
    required += [p + "mlp.shared_experts.down_proj.weight", p + "self_attn.o_proj.weight"]
    required += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    assert not set(required) - keys
    assert all(k.startswith(p) for k in keys)


def test_greedy_continuation_matches_the_card_and_looks_like_python(loaded, card):
    model, tokenizer = loaded
    sample = card["greedy_sample"]
    text = generate(model, tokenizer, prompt=sample["prompt"], max_tokens=sample["max_tokens"])
    assert text == sample["text"]
    again = generate(model, tokenizer, prompt=sample["prompt"], max_tokens=sample["max_tokens"])
    assert again == text
    # Python's own tokenizer reads it: names and operators, no error tokens. A continuation cut
    # at max_tokens may leave a bracket open, which tokenize reports only at the end of input.
    kinds = set()
    try:
        for tok in tokenize.generate_tokens(StringIO(sample["prompt"] + text + "\n").readline):
            kinds.add(tok.type)
    except tokenize.TokenError as e:
        assert "EOF" in str(e)
    assert tokenize.NAME in kinds and tokenize.OP in kinds
    assert tokenize.ERRORTOKEN not in kinds


def test_load_mtp_shapes_chaining_and_cache(loaded):
    model, tokenizer = loaded
    mtp = load_mtp(TINY, model)
    assert isinstance(mtp, MTPModule)
    assert isinstance(mtp.layer.mlp.switch_mlp.gate_proj, QuantizedSwitchLinear)
    ids = mx.array([tokenizer.encode("def add(a, b):\n    return a + b\n")])  # [1, T]
    t, h, v = ids.shape[1], model.args.hidden_size, model.args.vocab_size
    hidden = model.model(ids)  # [1, T, H]
    embed, head = model.model.embed_tokens, model.lm_head
    logits, out = mtp(hidden[:, :-1], ids[:, 1:], embed=embed, head=head)
    assert logits.shape == (1, t - 1, v) and out.shape == (1, t - 1, h)
    # Chained depth (DeepSeek-V3 inference reuses the module) keeps the shapes.
    logits2, _ = mtp(out[:, :-1], ids[:, 2:], embed=embed, head=head)
    assert logits2.shape == (1, t - 2, v)
    # Incremental decoding through the module's KV cache equals the full pass.
    cache = mtp.make_cache()
    split = (t - 1) // 2
    first, _ = mtp(hidden[:, :split], ids[:, 1 : split + 1], cache=cache, embed=embed, head=head)
    rest, _ = mtp(hidden[:, split:-1], ids[:, split + 1 :], cache=cache, embed=embed, head=head)
    assert cache.offset == t - 1
    step = mx.concatenate([first, rest], axis=1)
    assert mx.allclose(step, logits, atol=1e-3, rtol=1e-3)


def test_load_mtp_returns_none_without_mtp_file(tmp_path, loaded):
    model, _ = loaded
    assert load_mtp(tmp_path, model) is None


def test_card_is_rendered_from_its_numbers(card):
    from training.tiny_card_text import render_card

    config = json.loads((TINY / "config.json").read_text())
    assert (TINY / "README.md").read_text() == render_card(card, config)
    assert (TINY / "loss.png").stat().st_size > 0


def test_load_mtp_from_a_checkpoint_dict_like_deepseek_v3(loaded):
    model, _ = loaded
    n = model.args.num_hidden_layers
    weights = dict(mx.load(str(TINY / MTP_FILE)))
    # DeepSeek-V3's HF files also hold an embedding copy under the MTP prefix and other layers.
    weights[f"model.layers.{n}.embed_tokens.weight"] = mx.zeros((4, 4))
    weights["model.layers.0.input_layernorm.weight"] = mx.zeros((4,))
    mtp = load_mtp(weights, model)
    assert isinstance(mtp, MTPModule)
    del weights[f"model.layers.{n}.hnorm.weight"]
    with pytest.raises(SpecdecError, match="hnorm"):
        load_mtp(weights, model)
