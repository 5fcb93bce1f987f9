"""`specdec extract-mtp` on a DeepSeek-V3-layout HF checkpoint written here, FP8 included.

The test writes the MTP layer the way DeepSeek-V3's HF checkpoint stores it: per-expert
`mlp.experts.{e}.{gate,up,down}_proj.weight` and every linear weight as FP8 (E4M3) with a
`weight_scale_inv` per 128x128 block, `kv_b_proj` unsplit, an `embed_tokens` copy. Extraction
must give the dequantised values, stacked, and a module that loads and runs.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import deepseek_v3

from specdec.checkpoint.extract_mtp import extract_mtp
from specdec.checkpoint.mtp import load_mtp

CONFIG = {
    "model_type": "deepseek_v3",
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "routed_scaling_factor": 1.0,
    "kv_lora_rank": 32,
    "q_lora_rank": None,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "qk_nope_head_dim": 32,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "n_group": 1,
    "topk_group": 1,
    "num_experts_per_tok": 2,
    "moe_layer_freq": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "attention_bias": False,
}


def fp8_block(w: np.ndarray, rng) -> tuple[mx.array, mx.array, np.ndarray]:
    """FP8 weight + per-128-block scale_inv, and the float values they stand for."""
    m, n = w.shape
    scale = rng.uniform(0.5, 2.0, ((m + 127) // 128, (n + 127) // 128)).astype(np.float32)
    q = mx.to_fp8(mx.array(w / np.repeat(np.repeat(scale, 128, 0), 128, 1)[:m, :n]))
    deq = (
        np.array(mx.from_fp8(q, dtype=mx.float32))
        * np.repeat(np.repeat(scale, 128, 0), 128, 1)[:m, :n]
    )
    return q, mx.array(scale), deq


# Kimi K2 ships DeepSeek-V3's layout under its own model_type (mlx-lm remaps it to deepseek_v3).
@pytest.mark.parametrize("model_type", ["deepseek_v3", "kimi_k2"])
def test_extract_fp8_mtp_layer(tmp_path, model_type):
    rng = np.random.default_rng(0)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({**CONFIG, "model_type": model_type}))
    p, h, e = "model.layers.2.", CONFIG["hidden_size"], CONFIG["moe_intermediate_size"]
    heads, nope, rope, v = 2, 32, 16, 32
    shapes = {
        "eh_proj": (h, 2 * h),
        "self_attn.q_proj": (heads * (nope + rope), h),
        "self_attn.kv_a_proj_with_mqa": (32 + rope, h),
        "self_attn.kv_b_proj": (heads * (nope + v), 32),
        "self_attn.o_proj": (h, heads * v),
        "mlp.shared_experts.gate_proj": (e, h),
        "mlp.shared_experts.up_proj": (e, h),
        "mlp.shared_experts.down_proj": (h, e),
        **{
            f"mlp.experts.{i}.{m}": ((h, e) if m == "down_proj" else (e, h))
            for i in range(4)
            for m in ("gate_proj", "up_proj", "down_proj")
        },
    }
    tensors, expected = {}, {}
    for name, shape in shapes.items():
        q, s, deq = fp8_block(rng.normal(0, 0.05, shape).astype(np.float32), rng)
        tensors[f"{p}{name}.weight"], tensors[f"{p}{name}.weight_scale_inv"] = q, s
        expected[name] = deq
    for norm in (
        "enorm",
        "hnorm",
        "shared_head.norm",
        "input_layernorm",
        "post_attention_layernorm",
        "self_attn.kv_a_layernorm",
    ):
        tensors[f"{p}{norm}.weight"] = mx.ones((32 if "kv_a" in norm else h,))
    tensors[f"{p}mlp.gate.weight"] = mx.array(rng.normal(0, 0.1, (4, h)).astype(np.float32))
    tensors[f"{p}mlp.gate.e_score_correction_bias"] = mx.zeros((4,))
    tensors[f"{p}embed_tokens.weight"] = mx.zeros((256, h))
    tensors["model.layers.0.input_layernorm.weight"] = mx.ones((h,))  # a main-layer tensor
    mx.save_safetensors(str(hf / "model-00001.safetensors"), tensors)

    out = extract_mtp(hf, tmp_path / "mlx")
    saved = mx.load(str(out))
    assert not any("embed_tokens" in k or "weight_scale_inv" in k for k in saved)
    gate = np.array(saved[f"{p}mlp.switch_mlp.gate_proj.weight"].astype(mx.float32))  # [4, e, h]
    for i in range(4):
        np.testing.assert_allclose(
            gate[i], expected[f"mlp.experts.{i}.gate_proj"], rtol=1e-2, atol=1e-3
        )
    np.testing.assert_allclose(
        np.array(saved[f"{p}eh_proj.weight"].astype(mx.float32)),
        expected["eh_proj"],
        rtol=1e-2,
        atol=1e-3,
    )

    args = deepseek_v3.ModelArgs.from_dict({**CONFIG, "model_type": model_type})
    target = deepseek_v3.Model(args)
    mtp = load_mtp(tmp_path / "mlx", target)
    logits, hid = mtp(
        mx.zeros((1, 3, h)),
        mx.array([[1, 2, 3]]),
        embed=target.model.embed_tokens,
        head=target.lm_head,
    )
    assert logits.shape == (1, 3, 256) and hid.shape == (1, 3, h)
    assert bool(mx.all(mx.isfinite(logits)))


@pytest.mark.parametrize("bits", [None, 4])
def test_save_with_mtp_writes_a_directory_both_loaders_open(tmp_path, bits):
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model

    from specdec.checkpoint.mtp import MTPModule, quantize_with_mtp, save_with_mtp

    args = deepseek_v3.ModelArgs.from_dict(CONFIG)
    model, mtp, config = deepseek_v3.Model(args), MTPModule(args), dict(CONFIG)
    if bits:
        model, config = quantize_with_mtp(model, mtp, config, 64, bits)
        assert any(k.endswith(".scales") for k, _ in tree_flatten(mtp.parameters()))
    save_with_mtp(tmp_path / "m", model, mtp, config)
    assert not list((tmp_path / "m").glob("*partial*"))
    loaded, _ = load_model(tmp_path / "m")  # mlx-lm's own loader: strict, ignores mtp.safetensors
    again = load_mtp(tmp_path / "m", loaded)
    want = dict(tree_flatten(mtp.parameters()))
    for name, v in tree_flatten(again.parameters()):
        assert mx.array_equal(v, want[name]).item(), name


def test_a_failed_save_keeps_the_previous_files_and_leaves_no_temporary(tmp_path, monkeypatch):
    from specdec.checkpoint.mtp import MTPModule, save_with_mtp

    args = deepseek_v3.ModelArgs.from_dict(CONFIG)
    model, mtp = deepseek_v3.Model(args), MTPModule(args)
    save_with_mtp(tmp_path / "m", model, mtp, dict(CONFIG))
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    real = mx.save_safetensors

    def torn(path, *a, **k):  # the disk fills a hundred bytes into the file
        real(path, *a, **k)
        with open(path, "r+b") as f:
            f.truncate(100)
        raise RuntimeError("[save_safetensors] cannot write")

    monkeypatch.setattr(mx, "save_safetensors", torn)
    with pytest.raises(RuntimeError, match="cannot write"):
        save_with_mtp(tmp_path / "m", model, mtp, dict(CONFIG))
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before


def test_a_bad_group_size_or_another_models_folder_is_refused_before_any_work(tmp_path):
    """--group-size 0 and -64 ended in tracebacks, 48 quantized nothing and said it wrote the
    file; an OUT_DIR of another model (its config.json) took the module, and generate then
    failed on a tensor in two files, naming no fix."""
    from specdec.core.errors import SpecdecError

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({**CONFIG, "model_type": "deepseek_v3"}))
    for g in (0, -64, 48):
        with pytest.raises(SpecdecError, match=f"--group-size {g}: give one of 32, 64, 128"):
            extract_mtp(hf, tmp_path / "out", bits=4, group_size=g)
    other = tmp_path / "other"
    other.mkdir()
    wider = {**CONFIG, "model_type": "deepseek_v3", "hidden_size": 2 * CONFIG["hidden_size"]}
    (other / "config.json").write_text(json.dumps(wider))
    with pytest.raises(SpecdecError, match="is another model than .*hidden_size"):
        extract_mtp(hf, other)
    assert not (tmp_path / "out").exists() and not (other / "mtp.safetensors").exists()
