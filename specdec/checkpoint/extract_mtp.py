"""`specdec extract-mtp HF_DIR OUT_DIR`: a checkpoint's MTP layer, from a Hugging Face checkpoint.

    specdec extract-mtp ~/hf/DeepSeek-V3 ~/mlx/DeepSeek-V3-4bit [--quantize 4]

mlx-lm drops the MTP layer when it converts a checkpoint. This reads just that layer from the HF
safetensors (lazily, tensor by tensor), runs it through mlx-lm's own `sanitize` of the family,
optionally quantizes it like `mlx_lm.convert -q` (layers whose input width the group size does
not divide stay in float, as there), and writes OUT_DIR/mtp.safetensors (temporary
name, then rename) under our stored names, `model.layers.{num_hidden_layers}.*` (model/mtp.py).
Layouts, by config.json's model_type:

- deepseek_v3 / deepseek_v32 / kimi_k2: `model.layers.{N}.*`; DeepSeek-V3's sanitize does the
  FP8 block dequantisation with `weight_scale_inv`, stacks per-expert tensors into `switch_mlp`
  and splits `kv_b_proj` into `embed_q`/`unembed_out`.
- glm4_moe (GLM-4.5/4.6, `num_nextn_predict_layers`): `model.layers.{N}.*` too; GLM's sanitize
  stacks the experts. `shared_head.head` is kept when stored.
- qwen3_next: `mtp.fc`, `mtp.pre_fc_norm_{embedding,hidden}`, `mtp.norm`, `mtp.layers.0.*`;
  Qwen3-Next's sanitize stacks the experts and adds 1 to the zero-centred layer norms; the same
  1 is added here to the module's own three norms (GemmaRMSNorm in vLLM's qwen3_next_mtp.py).

- deepseek_v41 (DeepSeek-V4's layout, specdec/checkpoint/mtp/deepseek_v4.py): `mtp.0.*` under
  either naming. ds4's GGUF names (`attn_q_a.weight`, `hc_attn_fn.weight`, `exp_probs_b.bias`,
  stacked `ffn_gate_exps.weight`, ...; `*.gguf` files are read too where MLX reads their tensor
  types) map to the HF names by ds4's own gguf-tools table (deepseek4-quantize.c `layer_map`),
  the HF names (`attn.wq_a.weight`, `hc_attn_fn`, `ffn.experts.{e}.w1.weight`, ...) go through
  mlx-lm's deepseek_v41 sanitize as layer 0 (rename, stack, split `wo_a` by group), FP8 / FP4
  weights come back to bfloat16; `e_proj`, `h_proj`, `enorm`, `hnorm`, `norm` and
  `hc_head_{fn,base,scale}` keep their names (ds4's `mtp_weights_bind`).

The shared `embed_tokens` copy is dropped (the main model's is used). Only the first MTP depth is
extracted where a checkpoint has several (the drafter chains one module, as DeepSeek-V3 does).
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from mlx_lm.models import deepseek_v3, deepseek_v41, glm4_moe, qwen3_next

from specdec.checkpoint.mtp import load_mtp, quantize_mtp
from specdec.checkpoint.mtp.qwen3_next import Qwen3NextMTP
from specdec.core.errors import SpecdecError
from specdec.core.files import check_output_file, write_error
from specdec.core.inputs import read_json_object
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import write_safetensors


def _mtp_tensors(hf_dir: Path, prefix: str, gguf: bool = False) -> dict[str, mx.array]:
    """Every tensor under `prefix`, loaded lazily from whichever shard holds it (gguf: the
    directory's `*.gguf` files too, as ds4 ships V4's MTP layer)."""
    index = hf_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = read_json_object(index, "shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(f, str) for f in weight_map.values()
        ):
            raise SpecdecError(
                f"{index}: no weight_map of tensor -> shard file names: restore the checkpoint's "
                "index (or delete it to read every *.safetensors)"
            )
        files = sorted({f for k, f in weight_map.items() if k.startswith(prefix)})
    else:
        files = sorted(p.name for p in hf_dir.glob("*.safetensors"))
    files += sorted(p.name for p in hf_dir.glob("*.gguf")) if gguf else []
    out: dict[str, mx.array] = {}
    for name in files:
        try:
            shard = mx.load(str(hf_dir / name))
        except (RuntimeError, ValueError, OSError) as e:  # missing, truncated or not safetensors
            if name.endswith(".gguf"):
                raise SpecdecError(
                    f"{hf_dir / name}: MLX cannot read this file's tensors (it reads F32, F16, "
                    "BF16, Q4_0, Q4_1, Q8_0; ds4's experts are IQ2_XXS / Q2_K): use the Hugging "
                    "Face checkpoint's safetensors"
                ) from None
            raise SpecdecError(
                f"{hf_dir / name}: not a readable safetensors shard ({e}): copy the checkpoint again"
            ) from None
        out.update({k: v for k, v in shard.items() if k.startswith(prefix)})
    return out


def _sanitize_as_layer0(module, config: dict, layer: dict[str, mx.array]) -> dict[str, mx.array]:
    """mlx-lm's sanitize of `module` on decoder-layer tensors named `model.layers.0.*`: it works
    on main layers and drops the MTP layer, so the layer runs as layer 0 of a one-layer model."""
    args = module.ModelArgs.from_dict({**config, "num_hidden_layers": 1})
    shim = type("Shim", (), {"args": args})()
    return module.Model.sanitize(shim, layer)


def _deepseek_layout(hf_dir: Path, config: dict, module, n: int) -> dict[str, mx.array]:
    """DeepSeek-V3's and GLM-4.5's layout: everything under model.layers.{N}."""
    prefix = f"model.layers.{n}."
    raw = _mtp_tensors(hf_dir, prefix)
    if not raw:
        raise SpecdecError(
            f"{hf_dir}: no tensors under {prefix}*: this checkpoint has no MTP layer"
        )
    as_layer0 = {"model.layers.0." + k[len(prefix) :]: v for k, v in raw.items()}
    return {
        prefix + k[len("model.layers.0.") :]: v
        for k, v in _sanitize_as_layer0(module, config, as_layer0).items()
        if not k.startswith("model.layers.0.embed_tokens")
    }


def _qwen3_next_layout(hf_dir: Path, config: dict, module, n: int) -> dict[str, mx.array]:
    """Qwen3-Next's `mtp.*`: depth 0's decoder layer through mlx-lm's sanitize, own parts renamed."""
    raw = _mtp_tensors(hf_dir, "mtp.")
    if not raw:
        raise SpecdecError(f"{hf_dir}: no tensors under mtp.*: this checkpoint has no MTP layer")
    layer = {
        "model.layers.0." + k[len("mtp.layers.0.") :]: v
        for k, v in raw.items()
        if k.startswith("mtp.layers.0.")
    }
    out = {
        f"model.layers.{n}." + k[len("model.layers.0.") :]: v
        for k, v in _sanitize_as_layer0(module, config, layer).items()
    }
    for k, v in raw.items():
        own = k[len("mtp.") :]
        if own.startswith(Qwen3NextMTP.own_parts):
            # zero-centred RMSNorm (x̂·(1 + w)) stored as a plain RMSNorm weight, as mlx-lm does
            out[f"model.layers.{n}.{own}"] = v + 1.0 if "norm" in own and v.ndim == 1 else v
    return out


# ds4's GGUF names of a V4 layer -> the Hugging Face names (ds4's gguf-tools/deepseek4-quantize.c
# `layer_map`, read there in the GGUF -> HF direction), for the tensors the MTP block has.
_GGUF_TO_HF = {
    "hc_attn_base.weight": "hc_attn_base",
    "hc_attn_fn.weight": "hc_attn_fn",
    "hc_attn_scale.weight": "hc_attn_scale",
    "hc_ffn_base.weight": "hc_ffn_base",
    "hc_ffn_fn.weight": "hc_ffn_fn",
    "hc_ffn_scale.weight": "hc_ffn_scale",
    "attn_sinks.weight": "attn.attn_sink",
    "attn_q_a.weight": "attn.wq_a.weight",
    "attn_q_b.weight": "attn.wq_b.weight",
    "attn_q_a_norm.weight": "attn.q_norm.weight",
    "attn_kv.weight": "attn.wkv.weight",
    "attn_kv_a_norm.weight": "attn.kv_norm.weight",
    "attn_output_a.weight": "attn.wo_a.weight",
    "attn_output_b.weight": "attn.wo_b.weight",
    "attn_norm.weight": "attn_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "ffn_gate_shexp.weight": "ffn.shared_experts.w1.weight",
    "ffn_up_shexp.weight": "ffn.shared_experts.w3.weight",
    "ffn_down_shexp.weight": "ffn.shared_experts.w2.weight",
    "ffn_gate_inp.weight": "ffn.gate.weight",
    "exp_probs_b.bias": "ffn.gate.bias",
}
# ds4's stacked GGUF experts -> our stacked names (HF stores them per expert, `ffn.experts.E.wN`)
_GGUF_EXPERTS = {
    "ffn_gate_exps": "gate_proj",
    "ffn_up_exps": "up_proj",
    "ffn_down_exps": "down_proj",
}
# The MTP's own parts: ds4's GGUF name (HF: the same without `.weight` for hc_head_*) -> ours
_V4_OWN = {
    "hc_head_fn": "hc_head.fn",
    "hc_head_base": "hc_head.base",
    "hc_head_scale": "hc_head.scale",
    **{f"{p}.weight": f"{p}.weight" for p in ("e_proj", "h_proj", "enorm", "hnorm", "norm")},
}


def _dequantize_mx(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """mlx-lm's deepseek_v41 sanitize keeps FP8 / FP4 weights packed (`.scales`, ue8m0 per 32);
    our module loads float or affine weights, so these come back to bfloat16 here."""
    out = {}
    for k, v in weights.items():
        if k.endswith(".scales"):
            continue
        scales = weights.get(k.removesuffix("weight") + "scales")
        if scales is not None:
            bits = v.shape[-1] * 32 // (scales.shape[-1] * 32)
            v = mx.dequantize(v, scales, mode="mxfp8" if bits == 8 else "mxfp4")
            v = v.astype(mx.bfloat16)
        out[k] = v
    return out


def _deepseek_v4_layout(hf_dir: Path, config: dict, module, n: int) -> dict[str, mx.array]:
    """DeepSeek-V4's `mtp.0.*` (ds4's MTP GGUF names or the HF names): the block through
    mlx-lm's deepseek_v41 sanitize as layer 0, the module's own parts renamed."""
    raw = {k[len("mtp.0.") :]: v for k, v in _mtp_tensors(hf_dir, "mtp.0.", gguf=True).items()}
    if not raw:
        raise SpecdecError(f"{hf_dir}: no tensors under mtp.0.*: this checkpoint has no MTP layer")
    prefix = f"model.layers.{n}."
    out, layer = {}, {}
    for k, v in raw.items():
        own = _V4_OWN.get(k) or _V4_OWN.get(k.removesuffix(".weight"))
        stacked = k.removesuffix(".weight")
        if own is not None:
            out[prefix + own] = v
        elif stacked in _GGUF_EXPERTS:
            out[f"{prefix}mlp.experts.switch_mlp.{_GGUF_EXPERTS[stacked]}.weight"] = v
        else:
            layer["layers.0." + _GGUF_TO_HF.get(k, k)] = v
    for k, v in _dequantize_mx(_sanitize_as_layer0(module, config, layer)).items():
        out[prefix + k[len("model.layers.0.") :]] = v
    return out


# Each MTP-bearing family: the mlx-lm module whose ModelArgs and sanitize its checkpoint goes
# through, and the function that reads its MTP tensors under our names.
_LAYOUTS = {
    "deepseek_v3": (deepseek_v3, _deepseek_layout),
    "deepseek_v32": (deepseek_v3, _deepseek_layout),
    "kimi_k2": (deepseek_v3, _deepseek_layout),
    "glm4_moe": (glm4_moe, _deepseek_layout),
    "qwen3_next": (qwen3_next, _qwen3_next_layout),
    "deepseek_v41": (deepseek_v41, _deepseek_v4_layout),
}


GROUP_SIZES = (32, 64, 128)  # mlx's affine quantization groups
SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")


def _check_target(out_dir: Path, config: dict, hf_dir: Path) -> None:
    """OUT_DIR, where it has a config.json, is the model HF_DIR's MTP layer belongs to: the
    module then sits after its last layer and shares its embedding and head."""
    target = out_dir / "config.json"
    if not target.is_file():
        return
    theirs = read_json_object(target, "OUT_DIR's config.json")
    theirs = theirs.get("text_config", theirs)
    differ = [k for k in SHAPE_KEYS if k in theirs and k in config and theirs[k] != config[k]]
    if differ:
        k = differ[0]
        raise SpecdecError(
            f"{out_dir} is another model than {hf_dir}: its {k} is {theirs[k]!r}, the "
            f"checkpoint's {config[k]!r}; give the mlx-lm directory of this very model"
        )


def extract_mtp(
    hf_dir: Path,
    out_dir: Path,
    bits: int | None = None,
    group_size: int = 64,
    force: bool = False,
) -> Path:
    """Write OUT_DIR/mtp.safetensors; an existing one is replaced only with force=True."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    check_output_file(out_dir / MTP_FILE, "`specdec extract-mtp`", force, "--force")
    if not (hf_dir / "config.json").is_file():
        raise SpecdecError(f"{hf_dir}: no config.json; HF_DIR must be a Hugging Face checkpoint")
    config = read_json_object(hf_dir / "config.json", "HF config.json")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _LAYOUTS:
        raise SpecdecError(
            f"{hf_dir}: model_type {model_type!r} has no MTP layout specdec reads; extract-mtp "
            "takes deepseek_v3, deepseek_v32, kimi_k2, glm4_moe, qwen3_next and deepseek_v41 checkpoints"
        )
    n = config.get("num_hidden_layers")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:  # the MTP layer is layer n
        raise SpecdecError(
            f"{hf_dir}/config.json: num_hidden_layers is {n!r}, not a whole number >= 1: "
            "restore the checkpoint's config.json"
        )
    if bits is not None and group_size not in GROUP_SIZES:
        raise SpecdecError(
            f"--group-size {group_size}: give one of {', '.join(map(str, GROUP_SIZES))} (mlx's "
            "affine group sizes)"
        )
    _check_target(out_dir, config, hf_dir)
    module, layout = _LAYOUTS[model_type]
    weights = layout(hf_dir, config, module, n)
    target = type("Target", (), {"args": module.ModelArgs.from_dict(config)})
    mtp = load_mtp(weights, target)
    if bits is not None:
        quantize_mtp(mtp, group_size, bits)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(out_dir, e) from None
    return write_safetensors(out_dir / MTP_FILE, mtp.checkpoint_weights())
