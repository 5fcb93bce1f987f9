"""GLM-4.5's and Qwen3-Next's MTP layers: extracted from a Hugging Face-layout checkpoint written
here (real safetensors, per-expert tensors, HF names and norm conventions), they equal a
reference mirror of the public implementation on random weights.

The mirror follows vLLM's glm4_moe_mtp.py / qwen3_next_mtp.py in numpy from the raw HF tensors:
the norms (Qwen3-Next's zero-centred x̂·(1 + w) applied to the stored w, GLM's plain RMSNorm),
the concatenation order, the projection, the final norm and head, and which state is fed back
for a chained draft. The decoder layer in between is the family's own mlx-lm class built as
layer 0 of a one-layer main model and loaded from the HF names through mlx-lm's own sanitize,
which is what the reference's `Glm4MoeDecoderLayer` / `Qwen3NextDecoderLayer(full_attention)`
correspond to. Logits must agree within LOGIT_ATOL (float32).
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import glm4_moe, qwen3_next

from specdec.checkpoint.extract_mtp import extract_mtp
from specdec.checkpoint.mtp import load_mtp, mtp_class, target_io
from specdec.checkpoint.random_models import _randomize, family_config
from tests.helpers import LOGIT_ATOL

# The library's tiny Qwen3-Next, with fewer experts, partial rotary and a layer-4 full attention.
QWEN3_NEXT = {
    **family_config("qwen3_next"),
    "num_hidden_layers": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "partial_rotary_factor": 0.25,
    "full_attention_interval": 4,
}
GLM = {**family_config("glm4_moe"), "n_routed_experts": 8, "num_nextn_predict_layers": 1}


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32))


def _hf_layout(family: str, mtp) -> dict[str, mx.array]:
    """The module's random weights as the family's HF checkpoint stores them."""
    n = mtp.layer_idx
    hf = {}
    for name, v in tree_flatten(mtp.parameters()):
        inner = name.removeprefix("layer.")
        if ".switch_mlp." in inner:  # stacked [E, ...] -> one tensor per expert
            head, proj = inner.split(".switch_mlp.")
            for e in range(v.shape[0]):
                hf[f"{head}.experts.{e}.{proj}"] = v[e]
            continue
        if family == "qwen3_next" and "norm" in inner and v.ndim == 1:
            v = v - 1.0  # every Qwen3-Next RMSNorm is stored zero-centred (GemmaRMSNorm)
        hf[inner] = v
    if family == "qwen3_next":
        own = mtp.own_parts
        return {
            (f"mtp.{k}" if k.startswith(own) else f"mtp.layers.0.{k}"): v for k, v in hf.items()
        }
    return {f"model.layers.{n}.{k}": v for k, v in hf.items()}


def _reference_layer(family: str, config: dict, hf: dict[str, mx.array]):
    """The family's decoder layer as layer 0 of a one-layer mlx-lm model, loaded through
    mlx-lm's sanitize from the HF names (full attention and MoE, as the MTP layer is)."""
    if family == "qwen3_next":
        module, src = qwen3_next, "mtp.layers.0."
        cfg = {**config, "num_hidden_layers": 1, "full_attention_interval": 1}
    else:
        module, src = glm4_moe, f"model.layers.{config['num_hidden_layers']}."
        cfg = {**config, "num_hidden_layers": 1, "first_k_dense_replace": 0}
    model = module.Model(module.ModelArgs.from_dict(cfg))
    layer0 = {"model.layers.0." + k[len(src) :]: v for k, v in hf.items() if k.startswith(src)}
    weights = model.sanitize(layer0)
    model.load_weights(list(weights.items()), strict=False)
    return model.model.layers[0]


def _mirror(family, config, hf, layer, embed, head, hidden, tokens):
    """vLLM's MTP forward in numpy around `layer`: (logits [T, V], fed-back state [T, H])."""
    eps = config["rms_norm_eps"]
    w = {k: _np(v) for k, v in hf.items() if v.ndim <= 2 and ".experts." not in k}
    e = embed[tokens]  # [T, H]
    if family == "qwen3_next":
        x = (
            np.concatenate(
                [
                    _rms(e, 1 + w["mtp.pre_fc_norm_embedding.weight"], eps),
                    _rms(hidden, 1 + w["mtp.pre_fc_norm_hidden.weight"], eps),
                ],
                axis=-1,
            )
            @ w["mtp.fc.weight"].T
        )
    else:
        p = f"model.layers.{config['num_hidden_layers']}."
        x = (
            np.concatenate(
                [_rms(e, w[p + "enorm.weight"], eps), _rms(hidden, w[p + "hnorm.weight"], eps)],
                axis=-1,
            )
            @ w[p + "eh_proj.weight"].T
        )
    x = _np(layer(mx.array(x[None]), mask="causal", cache=None)[0])  # [T, H]
    if family == "qwen3_next":
        out = _rms(x, 1 + w["mtp.norm.weight"], eps)
        return out @ head.T, out  # vLLM feeds the normed state back
    out = _rms(x, w[p + "shared_head.norm.weight"], eps)
    return out @ w[p + "shared_head.head.weight"].T, x  # GLM's own head; pre-norm state back


@pytest.mark.parametrize("family", ["glm4_moe", "qwen3_next"])
def test_extracted_mtp_equals_the_reference_mirror(tmp_path, family):
    config = QWEN3_NEXT if family == "qwen3_next" else GLM
    module = qwen3_next if family == "qwen3_next" else glm4_moe
    args = module.ModelArgs.from_dict(config)
    main = module.Model(args)
    _randomize(main, mx.random.key(1))
    source = mtp_class(family)(args, own_head=True)  # GLM-4.5 stores shared_head.head
    _randomize(source, mx.random.key(2))
    hf = _hf_layout(family, source)
    hf["model.embed_tokens.weight"] = main.model.embed_tokens.weight  # a main-model tensor
    if family == "glm4_moe":  # the embedding copy DeepSeek-style checkpoints keep
        hf[f"model.layers.{args.num_hidden_layers}.embed_tokens.weight"] = mx.zeros((512, 64))
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(ckpt / "model-00001-of-00001.safetensors"), hf)

    extract_mtp(ckpt, tmp_path / "mlx")
    mtp = load_mtp(tmp_path / "mlx", main)
    assert type(mtp) is mtp_class(family)
    loaded = dict(tree_flatten(mtp.parameters()))
    for name, v in tree_flatten(source.parameters()):  # exact up to w - 1 + 1 in float32
        assert mx.allclose(loaded[name], v, rtol=0, atol=1e-6).item(), name

    rng = np.random.default_rng(0)
    hidden = rng.normal(0, 1, (7, 64)).astype(np.float32)  # [T, H]
    tokens = rng.integers(0, 512, 7)
    embed, head = target_io(main)
    logits, state = mtp(mx.array(hidden[None]), mx.array(tokens[None]), embed=embed, head=head)
    layer = _reference_layer(family, config, hf)
    ref_logits, ref_state = _mirror(
        family,
        config,
        hf,
        layer,
        _np(main.model.embed_tokens.weight),
        _np(main.lm_head.weight),
        hidden,
        tokens,
    )
    assert np.abs(_np(logits[0]) - ref_logits).max() <= LOGIT_ATOL
    assert np.abs(_np(state[0]) - ref_state).max() <= LOGIT_ATOL

    # Incremental use, as the drafter runs it: two calls on one cache == one call.
    cache = mtp.make_cache()
    first, _ = mtp(mx.array(hidden[None, :4]), mx.array(tokens[None, :4]), cache, embed, head)
    rest, _ = mtp(mx.array(hidden[None, 4:]), mx.array(tokens[None, 4:]), cache, embed, head)
    both = np.concatenate([_np(first[0]), _np(rest[0])])
    assert np.abs(both - _np(logits[0])).max() <= LOGIT_ATOL


@pytest.mark.parametrize("family", ["glm4_moe", "qwen3_next"])
def test_extract_quantized_and_errors(tmp_path, family):
    from specdec.core.errors import SpecdecError

    config = QWEN3_NEXT if family == "qwen3_next" else GLM
    module = qwen3_next if family == "qwen3_next" else glm4_moe
    args = module.ModelArgs.from_dict(config)
    source = mtp_class(family)(args)
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(ckpt / "model.safetensors"), _hf_layout(family, source))
    out = extract_mtp(ckpt, tmp_path / "mlx", bits=4)
    assert any(k.endswith(".scales") for k in mx.load(str(out)))
    main = module.Model(args)
    mtp = load_mtp(tmp_path / "mlx", main)
    logits, _ = mtp(mx.zeros((1, 2, 64)), mx.array([[1, 2]]), None, *target_io(main))
    assert bool(mx.all(mx.isfinite(logits)))

    empty = tmp_path / "no-mtp"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(empty / "model.safetensors"), {"model.norm.weight": mx.ones((64,))})
    with pytest.raises(SpecdecError, match="no MTP layer"):
        extract_mtp(empty, tmp_path / "x")


def test_extract_quantized_skips_layers_the_group_does_not_divide(tmp_path):
    # group 128 divides eh_proj's 2 x 64 inputs but no other layer's 64: mlx_lm.convert's
    # predicate keeps those in float, and so does extract-mtp
    args = glm4_moe.ModelArgs.from_dict(GLM)
    source = mtp_class("glm4_moe")(args)
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(GLM))
    mx.save_safetensors(str(ckpt / "model.safetensors"), _hf_layout("glm4_moe", source))
    out = extract_mtp(ckpt, tmp_path / "mlx", bits=4, group_size=128)
    scaled = {k.removesuffix(".scales") for k in mx.load(str(out)) if k.endswith(".scales")}
    assert scaled == {f"model.layers.{args.num_hidden_layers}.eh_proj"}
    main = glm4_moe.Model(args)
    mtp = load_mtp(tmp_path / "mlx", main)
    logits, _ = mtp(mx.zeros((1, 2, 64)), mx.array([[1, 2]]), None, *target_io(main))
    assert bool(mx.all(mx.isfinite(logits)))
