"""`specdec extract-mtp HF_DIR OUT_DIR`: DeepSeek-V3's MTP layer, from a Hugging Face checkpoint.

    specdec extract-mtp ~/hf/DeepSeek-V3 ~/mlx/DeepSeek-V3-4bit [--quantize 4]

mlx-lm drops the MTP layer (`model.layers.{num_hidden_layers}.*`) when it converts a DeepSeek-V3
checkpoint. This reads just that layer from the HF safetensors (lazily, tensor by tensor), runs
it through mlx-lm's own DeepSeek-V3 `sanitize` — FP8 block dequantisation with
`weight_scale_inv`, per-expert tensors stacked into `switch_mlp`, `kv_b_proj` split into
`embed_q`/`unembed_out` — optionally quantizes it like `mlx_lm.convert -q`, and writes
OUT_DIR/mtp.safetensors (temporary name, then rename). The shared `embed_tokens` copy is dropped
(the main model's is used); `shared_head.head` is kept when the checkpoint has it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import deepseek_v3

from specdec.errors import SpecdecError
from specdec.model.mtp import load_mtp
from specdec.store.files import durable_replace
from specdec.store.layout import MTP_FILE


def _mtp_tensors(hf_dir: Path, prefix: str) -> dict[str, mx.array]:
    """Every tensor under `prefix`, loaded lazily from whichever shard holds it."""
    index = hf_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({f for k, f in weight_map.items() if k.startswith(prefix)})
    else:
        files = sorted(p.name for p in hf_dir.glob("*.safetensors"))
    out: dict[str, mx.array] = {}
    for name in files:
        shard = mx.load(str(hf_dir / name))
        out.update({k: v for k, v in shard.items() if k.startswith(prefix)})
    return out


def extract_mtp(hf_dir: Path, out_dir: Path, bits: int | None = None, group_size: int = 64) -> Path:
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if not (hf_dir / "config.json").is_file():
        raise SpecdecError(f"{hf_dir}: no config.json; HF_DIR must be a Hugging Face checkpoint")
    config = json.loads((hf_dir / "config.json").read_text())
    if config.get("model_type") not in ("deepseek_v3", "deepseek_v32", "kimi_k2"):
        raise SpecdecError(
            f"{hf_dir}: model_type {config.get('model_type')!r} has no DeepSeek-V3 MTP layer"
        )
    n = int(config["num_hidden_layers"])
    prefix = f"model.layers.{n}."
    raw = _mtp_tensors(hf_dir, prefix)
    if not raw:
        raise SpecdecError(
            f"{hf_dir}: no tensors under {prefix}*: this checkpoint has no MTP layer"
        )
    # mlx-lm's sanitize works on main layers and drops layer 61: run it on the MTP layer
    # renamed to layer 0 of a one-layer model, then name it back.
    args = deepseek_v3.ModelArgs.from_dict({**config, "num_hidden_layers": 1})
    shim = type("Shim", (), {"args": args})()
    as_layer0 = {"model.layers.0." + k[len(prefix) :]: v for k, v in raw.items()}
    clean = deepseek_v3.Model.sanitize(shim, as_layer0)
    weights = {
        prefix + k[len("model.layers.0.") :]: v
        for k, v in clean.items()
        if not k.startswith("model.layers.0.embed_tokens")
    }
    mtp = load_mtp(weights, type("Target", (), {"args": deepseek_v3.ModelArgs.from_dict(config)}))
    if bits is not None:
        nn.quantize(mtp, group_size=group_size, bits=bits)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{MTP_FILE}.tmp-{os.getpid()}.safetensors"
    mx.save_safetensors(str(tmp), mtp.checkpoint_weights(), metadata={"format": "mlx"})
    durable_replace(tmp, out_dir / MTP_FILE)
    return out_dir / MTP_FILE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hf_dir", type=Path, help="Hugging Face DeepSeek-V3-layout checkpoint")
    p.add_argument(
        "out_dir", type=Path, help="the mlx-lm model directory to add mtp.safetensors to"
    )
    p.add_argument("--quantize", type=int, choices=[2, 3, 4, 6, 8], help="affine bits")
    p.add_argument("--group-size", type=int, default=64)


def run(args: argparse.Namespace) -> int:
    path = extract_mtp(args.hf_dir, args.out_dir, args.quantize, args.group_size)
    print(f"wrote {path}")
    return 0
