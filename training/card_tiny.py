"""Measure the SHIPPED `tiny` model on held-out stdlib files; write its card figures.

    python -m training.card_tiny                  # 65,536 held-out tokens (256 windows)
    python -m training.card_tiny --max-tokens 0   # every held-out token (slow on 2 cores)

Loads specdec/models/tiny exactly as users do (`mlx_lm.load`, quantized) plus its MTP module
(`specdec.checkpoint.mtp.load_mtp`), tokenizes the held-out files (rule: training/tiny_corpus.py)
with the shipped tokenizer, and evaluates --max-tokens / --seq windows of --seq tokens, spread
evenly over the held-out stream, under teacher forcing of the real text. Writes, into the model directory: card.json (every number on the
card), loss.png (training curve from train_log.jsonl) and README.md (the card, rendered from
card.json by training/tiny_card_text.py).

Definitions (per window position i):
  main top-1       argmax main(i) == t_{i+1}
  MTP acceptance   argmax MTP(i) == argmax main(i+1): the MTP head, given h_i and the real
                   t_{i+1}, agrees with the main model's greedy next-next token (what a
                   depth-1 MTP draft needs to be accepted at temperature 0)
  overlap          |experts(t_i) ∩ experts(t_{i-1})| / k per MoE layer; random is k/N
  load             selections per expert over all held-out tokens; max/mean per layer
  gate mass        gate weights sorted descending, normalised to sum 1, mean per slot 1..k
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from specdec.core.blas import active_blas, ensure_fast_blas

ensure_fast_blas()

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm import load  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from specdec.checkpoint.bundled import BUNDLED  # noqa: E402
from specdec.checkpoint.mtp import load_mtp  # noqa: E402
from training.tiny_card_text import render_card  # noqa: E402
from training.tiny_corpus import EOT, encode_files, stdlib_corpus  # noqa: E402

PROMPT = "class Config:\n    def __init__(self, name):\n        self."
SAMPLE_TOKENS = 32


class RoutingRecorder(nn.Module):
    """Wraps a MoEGate; appends (indices, scores) of every call to `log`."""

    def __init__(self, gate: nn.Module, log: list):
        super().__init__()
        self.gate = gate
        object.__setattr__(self, "log", log)  # a plain list, not a parameter

    def __call__(self, x):
        inds, scores = self.gate(x)  # [B, T, k] each
        self.log.append((inds, scores))
        return inds, scores


def greedy(model, tokenizer, prompt: str, n: int) -> str:
    """Greedy continuation with mlx-lm's own generator (argmax sampler)."""
    from mlx_lm import generate

    return generate(model, tokenizer, prompt=prompt, max_tokens=n, verbose=False)


def evaluate(model, mtp, tokens: np.ndarray, seq: int, batch: int, max_tokens: int) -> dict:
    args = model.args
    moe_layers = [layer.mlp for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    moe_layers.append(mtp.layer.mlp)
    logs: list[list] = [[] for _ in moe_layers]
    for mlp, log in zip(moe_layers, logs, strict=True):
        mlp.gate = RoutingRecorder(mlp.gate, log)
    # Windows spread evenly over the whole held-out stream, so every file region is sampled.
    starts = np.linspace(0, len(tokens) - seq - 1, max(1, max_tokens // seq)).astype(np.int64)
    x_all = np.stack([tokens[s : s + seq] for s in starts])  # [W, T]
    y_all = np.stack([tokens[s + 1 : s + seq + 1] for s in starts])  # [W, T]
    n_win = len(starts)
    nll = top1 = acc = mtp_top1 = n_main = n_mtp = 0.0
    k, n_exp = args.num_experts_per_tok, args.n_routed_experts
    loads = np.zeros((len(moe_layers), n_exp))
    overlap = np.zeros(len(moe_layers))
    n_pairs = 0
    mass = np.zeros((len(moe_layers), k))
    for s in range(0, n_win, batch):
        x, y = mx.array(x_all[s : s + batch]), mx.array(y_all[s : s + batch])  # [B, T]
        hidden = model.model(x)  # [B, T, H], after the final norm
        logits = model.lm_head(hidden)  # [B, T, V]
        logits2, _ = mtp(hidden, y, embed=model.model.embed_tokens, head=model.lm_head)
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        nll += float(-mx.take_along_axis(lp, y[..., None], axis=-1).sum())
        pred = logits.argmax(-1)  # [B, T]
        pred2 = logits2.argmax(-1)  # [B, T]: guesses t_{i+2}
        top1 += float((pred == y).sum())
        acc += float((pred2[:, :-1] == pred[:, 1:]).sum())
        mtp_top1 += float((pred2[:, :-1] == y[:, 1:]).sum())
        n_main += y.size
        n_mtp += y[:, 1:].size
        for li, log in enumerate(logs):
            inds, scores = (np.array(a) for a in log.pop())  # [B, T, k]
            flat = inds.reshape(-1)
            loads[li] += np.bincount(flat, minlength=n_exp)
            same = (inds[:, 1:, :, None] == inds[:, :-1, None, :]).any(-1).sum(-1)  # [B, T-1]
            overlap[li] += same.sum() / k
            w = -np.sort(-scores, axis=-1)
            mass[li] += (w / w.sum(-1, keepdims=True)).reshape(-1, k).sum(0)
        n_pairs += x.shape[0] * (seq - 1)
    names = [
        f"layer {i}" for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")
    ]
    names.append(f"MTP (layer {args.num_hidden_layers})")
    loss = nll / n_main
    return {
        "heldout_tokens": int(n_main),
        "heldout_loss": loss,
        "heldout_ppl": float(np.exp(loss)),
        "main_top1": top1 / n_main,
        "mtp_acceptance": acc / n_mtp,
        "mtp_top1_vs_text": mtp_top1 / n_mtp,
        "routing": {
            "layers": names,
            "overlap_prev_token": (overlap / n_pairs).tolist(),
            "overlap_random": k / n_exp,
            "max_over_mean_load": (loads.max(1) / loads.mean(1)).tolist(),
            "gate_mass_by_slot": (mass / n_main).tolist(),
        },
    }


def plot_loss(log_path: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    tok = [r["tokens"] / 1e6 for r in recs]
    ax.plot(tok, [r["main_loss"] for r in recs], label="main (next token), train")
    ax.plot(tok, [r["mtp_loss"] for r in recs], label="MTP (token after next), train")
    if "val_main_loss" in recs[0]:  # training/train_tiny_torch.py also logs validation
        ax.plot(tok, [r["val_main_loss"] for r in recs], "--", label="main, validation")
        ax.plot(tok, [r["val_mtp_loss"] for r in recs], "--", label="MTP, validation")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("tiny: training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = out.with_name(out.stem + ".partial.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(BUNDLED["tiny"]))
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--max-tokens", type=int, default=65536, help="evaluated tokens; 0: the whole stream"
    )
    p.add_argument(
        "--render-only", action="store_true", help="rewrite README.md from card.json, no eval"
    )
    a = p.parse_args()
    model_dir = Path(a.model_dir)
    if a.render_only:
        card = json.loads((model_dir / "card.json").read_text())
        card["training"] = json.loads((model_dir / "train_summary.json").read_text())
        card.setdefault("eval_seq", a.seq)
        plot_loss(model_dir / "train_log.jsonl", model_dir / "loss.png")
    else:
        card = measure(model_dir, a)
        plot_loss(model_dir / "train_log.jsonl", model_dir / "loss.png")
    config = json.loads((model_dir / "config.json").read_text())
    for name, text in (
        ("card.json", json.dumps(card, indent=2) + "\n"),
        ("README.md", render_card(card, config)),
    ):
        tmp = model_dir / (name + ".partial")
        tmp.write_text(text)
        os.replace(tmp, model_dir / name)
    print(json.dumps({k: v for k, v in card.items() if k not in ("corpus", "training")}, indent=2))


def measure(model_dir: Path, a: argparse.Namespace) -> dict:
    """Every card figure, from the files in model_dir."""
    model, tokenizer = load(str(model_dir))
    mtp = load_mtp(model_dir, model)
    corpus = stdlib_corpus()
    tokens = encode_files(
        Tokenizer.from_file(str(model_dir / "tokenizer.json")), corpus, corpus.heldout
    )
    sample = greedy(model, tokenizer, PROMPT, SAMPLE_TOKENS)
    t0 = time.perf_counter()
    metrics = evaluate(model, mtp, tokens, a.seq, a.batch, a.max_tokens or len(tokens))
    return {
        **metrics,
        "eval_seconds": time.perf_counter() - t0,
        "eval_seq": a.seq,
        "eval_command": f"python -m training.card_tiny --max-tokens {a.max_tokens}",
        "heldout_stream_tokens": int(len(tokens)),
        "corpus": {**corpus.describe(), "eot": EOT},
        "training": json.loads((model_dir / "train_summary.json").read_text()),
        "greedy_sample": {"prompt": PROMPT, "max_tokens": SAMPLE_TOKENS, "text": sample},
        "sizes_bytes": {f.name: f.stat().st_size for f in sorted(model_dir.glob("*.safetensors"))},
        # What ensure_fast_blas preloaded; active_blas() can name numpy's own bundled copy.
        "machine": {
            "platform": platform.platform(),
            "blas": os.environ.get("LD_PRELOAD") or active_blas(),
        },
    }


if __name__ == "__main__":
    main()
