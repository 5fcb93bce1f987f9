"""`specdec extract-mtp` on DeepSeek-V4's MTP layer under ds4's GGUF names and the HF names.

A random V4 MTP module (tiny deepseek_v41 config) is written the two ways a V4 checkpoint names
it: ds4's (`mtp_weights_bind` in ds4.c: `mtp.0.attn_q_a.weight`, `mtp.0.hc_attn_fn.weight`,
stacked `mtp.0.ffn_gate_exps.weight`, ...; once as safetensors, once as a GGUF file) and the
Hugging Face checkpoint's (`mtp.0.attn.wq_a.weight`, `mtp.0.hc_attn_fn`, per-expert
`mtp.0.ffn.experts.{e}.w1.weight`, `wo_a` unsplit). Each extraction must give back the module's
own weights and a module that computes the same logits.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import deepseek_v41

from specdec.checkpoint.extract_mtp import extract_mtp
from specdec.checkpoint.families import family_config
from specdec.checkpoint.mtp import DeepseekV4MTP, load_mtp, target_io
from specdec.checkpoint.random_models import _randomize

CONFIG = family_config("deepseek_v41")
# our stored name (under model.layers.N.) -> ds4's MTP GGUF name (ds4.c mtp_weights_bind), HF name
NAMES = {
    "hc_head.base": ("hc_head_base.weight", "hc_head_base"),
    "hc_head.fn": ("hc_head_fn.weight", "hc_head_fn"),
    "hc_head.scale": ("hc_head_scale.weight", "hc_head_scale"),
    "e_proj.weight": ("e_proj.weight", "e_proj.weight"),
    "h_proj.weight": ("h_proj.weight", "h_proj.weight"),
    "enorm.weight": ("enorm.weight", "enorm.weight"),
    "hnorm.weight": ("hnorm.weight", "hnorm.weight"),
    "norm.weight": ("norm.weight", "norm.weight"),
    "attn_hc.fn": ("hc_attn_fn.weight", "hc_attn_fn"),
    "attn_hc.scale": ("hc_attn_scale.weight", "hc_attn_scale"),
    "attn_hc.base": ("hc_attn_base.weight", "hc_attn_base"),
    "input_layernorm.weight": ("attn_norm.weight", "attn_norm.weight"),
    "self_attn.q_a_proj.weight": ("attn_q_a.weight", "attn.wq_a.weight"),
    "self_attn.q_a_norm.weight": ("attn_q_a_norm.weight", "attn.q_norm.weight"),
    "self_attn.q_b_proj.weight": ("attn_q_b.weight", "attn.wq_b.weight"),
    "self_attn.kv_proj.weight": ("attn_kv.weight", "attn.wkv.weight"),
    "self_attn.kv_norm.weight": ("attn_kv_a_norm.weight", "attn.kv_norm.weight"),
    "self_attn.sinks": ("attn_sinks.weight", "attn.attn_sink"),
    "self_attn.o_a_proj.weight": ("attn_output_a.weight", "attn.wo_a.weight"),
    "self_attn.o_b_proj.weight": ("attn_output_b.weight", "attn.wo_b.weight"),
    "ffn_hc.fn": ("hc_ffn_fn.weight", "hc_ffn_fn"),
    "ffn_hc.scale": ("hc_ffn_scale.weight", "hc_ffn_scale"),
    "ffn_hc.base": ("hc_ffn_base.weight", "hc_ffn_base"),
    "post_attention_layernorm.weight": ("ffn_norm.weight", "ffn_norm.weight"),
    "mlp.gate.weight": ("ffn_gate_inp.weight", "ffn.gate.weight"),
    "mlp.gate.e_score_correction_bias": ("exp_probs_b.bias", "ffn.gate.bias"),
    "mlp.experts.switch_mlp.gate_proj.weight": ("ffn_gate_exps.weight", "ffn.experts.{}.w1.weight"),
    "mlp.experts.switch_mlp.up_proj.weight": ("ffn_up_exps.weight", "ffn.experts.{}.w3.weight"),
    "mlp.experts.switch_mlp.down_proj.weight": ("ffn_down_exps.weight", "ffn.experts.{}.w2.weight"),
    "mlp.shared_experts.gate_proj.weight": (
        "ffn_gate_shexp.weight",
        "ffn.shared_experts.w1.weight",
    ),
    "mlp.shared_experts.up_proj.weight": ("ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"),
    "mlp.shared_experts.down_proj.weight": (
        "ffn_down_shexp.weight",
        "ffn.shared_experts.w2.weight",
    ),
}


def _as_checkpoint(mtp: DeepseekV4MTP, naming: str) -> dict[str, mx.array]:
    ours = {k.removeprefix("layer."): v for k, v in tree_flatten(mtp.parameters())}
    assert set(ours) == set(NAMES), "every parameter has a stored name in both namings"
    out = {}
    for name, v in ours.items():
        gguf, hf = NAMES[name]
        if naming == "gguf":
            out["mtp.0." + gguf] = v
        elif "{}" in hf:
            out.update({"mtp.0." + hf.format(e): v[e] for e in range(v.shape[0])})
        else:  # HF stores wo_a as one [groups * rank, group_dim] matrix
            out["mtp.0." + hf] = v.reshape(-1, v.shape[-1]) if "wo_a" in hf else v
    return out


@pytest.mark.parametrize("naming", ["gguf", "gguf-file", "hf"])
def test_extract_v4_mtp_under_both_namings(tmp_path, naming):
    args = deepseek_v41.ModelArgs.from_dict(CONFIG)
    mtp = DeepseekV4MTP(args)
    _randomize(mtp, mx.random.key(1))
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(CONFIG))
    tensors = _as_checkpoint(mtp, naming.removesuffix("-file"))
    tensors["layers.0.attn_norm.weight"] = mx.ones((args.hidden_size,))  # a main-layer tensor
    if naming == "gguf-file":
        mx.save_gguf(str(src / "mtp.gguf"), tensors)
    else:
        mx.save_safetensors(str(src / "model-00001.safetensors"), tensors)

    out = extract_mtp(src, tmp_path / "mlx")
    saved = mx.load(str(out))
    want = mtp.checkpoint_weights()
    assert set(saved) == set(want)
    for k, v in want.items():
        assert np.array_equal(np.array(saved[k]), np.array(v)), k

    target = deepseek_v41.Model(args)
    _randomize(target, mx.random.key(2))
    loaded = load_mtp(tmp_path / "mlx", target)
    streams = mx.random.normal((1, 3, args.hc_mult, args.hidden_size), key=mx.random.key(3))
    tokens = mx.array([[1, 2, 3]])
    got, _ = loaded(streams, tokens, None, *target_io(target))
    ref, _ = mtp(streams, tokens, None, *target_io(target))
    assert np.array_equal(np.array(got), np.array(ref))


def test_extract_v4_fp8_weight_comes_back_to_bfloat16(tmp_path):
    """An HF FP8 (E4M3) weight with ue8m0 scales per 32x32 tile, as mlx-lm's deepseek_v41
    sanitize reads them: extraction gives fp8 value x 2^(scale - 127), in bfloat16."""
    args = deepseek_v41.ModelArgs.from_dict(CONFIG)
    mtp = DeepseekV4MTP(args)
    _randomize(mtp, mx.random.key(1))
    tensors = _as_checkpoint(mtp, "hf")
    w = tensors["mtp.0.attn.wq_a.weight"]  # [q_lora_rank, hidden]
    rng = np.random.default_rng(0)
    exps = rng.integers(125, 129, (w.shape[0] // 32, w.shape[1] // 32)).astype(np.uint8)
    q = mx.to_fp8(w)  # [out, in] uint8 E4M3
    tensors["mtp.0.attn.wq_a.weight"], tensors["mtp.0.attn.wq_a.scale"] = q, mx.array(exps)
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(CONFIG))
    mx.save_safetensors(str(src / "model.safetensors"), tensors)

    saved = mx.load(str(extract_mtp(src, tmp_path / "mlx")))
    got = saved[f"model.layers.{args.num_hidden_layers}.self_attn.q_a_proj.weight"]
    scale = np.repeat(np.repeat(2.0 ** (exps.astype(np.float64) - 127), 32, 0), 32, 1)
    want = np.array(mx.from_fp8(q, dtype=mx.float32)) * scale
    assert got.dtype == mx.bfloat16
    assert np.array_equal(np.array(got.astype(mx.float32)), want)
    assert not any(k.endswith(".scales") for k in saved)
