"""Export the PyTorch-trained `tiny` model to an mlx-lm model directory (4-bit, like convert -q).

    python -m training.export_tiny_torch --weights out/round3 --tokenizer runs/tiny/tokenizer \
        --out out/tiny-gpu

Reads the shards `tiny_torch.NN.pt` and runs.json that `training/train_tiny_torch.py select`
wrote (HF DeepSeek-V3 names, bfloat16), runs mlx-lm's own `deepseek_v3.Model.sanitize` (stacks
the per-expert weights into `switch_mlp`, splits `kv_b_proj` into `embed_q` / `unembed_out`),
over the MTP layer too, loads the main model strictly and the MTP with
`specdec.checkpoint.mtp.load_mtp`, quantizes both as `mlx_lm.convert -q` does (affine, 4 bits,
group 64; layers whose input width is not a multiple of 64 stay float) and writes config.json,
model.safetensors, mtp.safetensors, the tokenizer files, train_log.jsonl and
train_summary.json. Needs torch (CPU build) only to read the shards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
from mlx_lm.models.deepseek_v3 import Model, ModelArgs

from specdec.checkpoint.mtp import MTPModule, load_mtp, quantize_with_mtp, save_with_mtp
from training.tiny_torch_model import TinyConfig

QUANT = {"group_size": 64, "bits": 4, "mode": "affine"}


def read_shards(folder: Path) -> dict[str, np.ndarray]:
    """HF-named float32 arrays from every tiny_torch.NN.pt shard in `folder`."""
    import torch

    out: dict[str, np.ndarray] = {}
    for shard in sorted(folder.glob("tiny_torch.*.pt")):
        out.update({k: v.float().numpy() for k, v in torch.load(shard).items()})
    return out


def build_mlx(hf: dict[str, np.ndarray], cfg: TinyConfig) -> tuple[Model, MTPModule, dict]:
    """Float mlx-lm Model + MTPModule from HF-named weights, through mlx-lm's sanitize."""
    config = cfg.hf_config()
    args = ModelArgs.from_dict(config)
    weights = {k: mx.array(v) for k, v in hf.items()}
    # sanitize only loops over layers < num_hidden_layers: widen by one so it also converts
    # the MTP layer (model.layers.N), exactly as for the main layers.
    widened = SimpleNamespace(args=replace(args, num_hidden_layers=args.num_hidden_layers + 1))
    weights = Model.sanitize(widened, weights)
    prefix = f"model.layers.{args.num_hidden_layers}."
    main = {k: v for k, v in weights.items() if not k.startswith(prefix)}
    model = Model(args)
    model.load_weights(list(main.items()), strict=True)
    model.eval()
    mtp = load_mtp({k: v for k, v in weights.items() if k.startswith(prefix)}, model)
    return model, mtp, config


def quantize(model: Model, mtp: MTPModule, config: dict) -> tuple[Model, MTPModule, dict]:
    model, config = quantize_with_mtp(model, mtp, config, QUANT["group_size"], QUANT["bits"])
    return model, mtp, config


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def export(weights_dir: Path, tokenizer_dir: Path, out: Path) -> None:
    cfg = TinyConfig()
    model, mtp, config = quantize(*build_mlx(read_shards(weights_dir), cfg))
    save_with_mtp(out, model, mtp, config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, out / name)
    runs = json.loads((weights_dir / "runs.json").read_text())
    run = runs["runs"][runs["selected"]]
    hp, best = run["hyperparameters"], run["best"]
    # train_log.jsonl: the selected run's curve, under the keys of the MLX path's log.
    log = [
        {
            **r,
            "tokens": r["step"] * run["tokens_per_step"],
            "main_loss": r["train_main"],
            "mtp_loss": r["train_mtp"],
        }
        for r in run["log"]
    ]
    _write(out / "train_log.jsonl", "".join(json.dumps(r) + "\n" for r in log))
    summary = {
        "trainer": "training/train_tiny_torch.py (PyTorch, bf16 autocast)",
        "device": run["device"],
        "torch": run["torch"],
        "selected_run": runs["selected"],
        "command": "python -m training.train_tiny_torch train "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in hp.items() if k != "cmd"),
        "step": best["step"],
        "total_steps": run["steps_planned"],
        "tokens": best["step"] * run["tokens_per_step"],
        "epochs": best["epoch"],
        "elapsed_s": best["elapsed_s"],
        "hyperparameters": {**hp, "time_limit_min": hp["time_limit_s"] / 60},
        "mtp_loss_weight": run["mtp_loss_weight"],
        "validation_at_best": {k: v for k, v in best.items() if k.startswith("val_")},
        "blas": "n/a (trained on GPU)",
        "other_runs": {
            name: {k: v for k, v in r["best"].items() if k.startswith("val_") or k == "step"}
            | {"smooth": r["hyperparameters"]["smooth"], "dropout": r["hyperparameters"]["dropout"]}
            for name, r in runs["runs"].items()
        },
    }
    _write(out / "train_summary.json", json.dumps(summary, indent=2) + "\n")
    sizes = {f.name: f.stat().st_size for f in sorted(out.glob("*.safetensors"))}
    print(f"wrote {out}: {sizes}, {sum(sizes.values()) / 2**20:.1f} MiB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", required=True, help="folder with tiny_torch.NN.pt + runs.json")
    p.add_argument("--tokenizer", required=True, help="folder with tokenizer.json")
    p.add_argument("--out", default="out/tiny-gpu")
    a = p.parse_args()
    export(Path(a.weights), Path(a.tokenizer), Path(a.out))


if __name__ == "__main__":
    main()
