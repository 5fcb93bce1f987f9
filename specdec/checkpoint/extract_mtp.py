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

The shared `embed_tokens` copy is dropped (the main model's is used). Only the first MTP depth is
extracted where a checkpoint has several (the drafter chains one module, as DeepSeek-V3 does).
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from mlx_lm.models import deepseek_v3, glm4_moe, qwen3_next

from specdec.checkpoint.mtp import load_mtp, quantize_mtp
from specdec.checkpoint.mtp.qwen3_next import Qwen3NextMTP
from specdec.core.errors import SpecdecError
from specdec.core.inputs import read_json_object
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import write_safetensors


def _mtp_tensors(hf_dir: Path, prefix: str) -> dict[str, mx.array]:
    """Every tensor under `prefix`, loaded lazily from whichever shard holds it."""
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
    out: dict[str, mx.array] = {}
    for name in files:
        try:
            shard = mx.load(str(hf_dir / name))
        except (RuntimeError, ValueError, OSError) as e:  # missing, truncated or not safetensors
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


# Each MTP-bearing family: the mlx-lm module whose ModelArgs and sanitize its checkpoint goes
# through, and the function that reads its MTP tensors under our names.
_LAYOUTS = {
    "deepseek_v3": (deepseek_v3, _deepseek_layout),
    "deepseek_v32": (deepseek_v3, _deepseek_layout),
    "kimi_k2": (deepseek_v3, _deepseek_layout),
    "glm4_moe": (glm4_moe, _deepseek_layout),
    "qwen3_next": (qwen3_next, _qwen3_next_layout),
}


def extract_mtp(hf_dir: Path, out_dir: Path, bits: int | None = None, group_size: int = 64) -> Path:
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if not (hf_dir / "config.json").is_file():
        raise SpecdecError(f"{hf_dir}: no config.json; HF_DIR must be a Hugging Face checkpoint")
    config = read_json_object(hf_dir / "config.json", "HF config.json")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _LAYOUTS:
        raise SpecdecError(
            f"{hf_dir}: model_type {model_type!r} has no MTP layout specdec reads; extract-mtp "
            "takes deepseek_v3, deepseek_v32, kimi_k2, glm4_moe and qwen3_next checkpoints"
        )
    n = config.get("num_hidden_layers")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:  # the MTP layer is layer n
        raise SpecdecError(
            f"{hf_dir}/config.json: num_hidden_layers is {n!r}, not a whole number >= 1: "
            "restore the checkpoint's config.json"
        )
    module, layout = _LAYOUTS[model_type]
    weights = layout(hf_dir, config, module, n)
    target = type("Target", (), {"args": module.ModelArgs.from_dict(config)})
    mtp = load_mtp(weights, target)
    if bits is not None:
        quantize_mtp(mtp, group_size, bits)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_safetensors(out_dir / MTP_FILE, mtp.checkpoint_weights())
