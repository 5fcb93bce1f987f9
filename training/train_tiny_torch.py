"""Train the `tiny` DeepSeek-V3 MoE + MTP model in PyTorch (CUDA or CPU); the GPU path.

    python -m training.train_tiny_torch train --data runs/tiny --out /tmp/runs/a --epochs 20
    python -m training.train_tiny_torch select --runs /tmp/runs/a /tmp/runs/b --out $OUT

`train` reads <data>/train.npy (int32 token ids of training/tiny_corpus.py), holds out its
last --val-frac as a validation stream (whole files at the tail: the split of the corpus is by
file), and never reads heldout.npy, which stays for the final held-out report. Loss = CE(main,
t_{i+1}) + 0.3·CE(MTP, t_{i+2}); AdamW, linear warmup then cosine to 10%, bf16 autocast on
CUDA. After every step each MoE layer's router bias moves by u·sign(mean load − load_e)
(DeepSeek-V3's auxiliary-loss-free balance; MTP layer included). Every --eval-every steps the
validation loss is measured and the best model (by main + 0.3·MTP loss) is kept; the run
writes <out>/best.pt (float32 state dict), metrics.jsonl and summary.json.
`select` picks the run with the lowest best validation loss and writes its weights in the HF
DeepSeek-V3 naming (training/tiny_torch_model.hf_state_dict) as bfloat16 shards (router biases
float32) of at most
15 MiB (tiny_torch.NN.pt) plus runs.json, which is what training/export_tiny_torch.py reads.
The model code is training/tiny_torch_model.py; the CPU/MLX path is training/train_tiny.py.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from training.tiny_torch_model import TinyConfig, TinyMTP, hf_state_dict

MTP_WEIGHT = 0.3
SHARD_BYTES = 15 * 2**20


def meets_bars(ev: dict, prefix: str = "") -> bool:
    """Issue 3's bars with a ~10% margin (the shipped model is judged on other files, held-out,
    after 4-bit quantization): overlap with the previous token >= 3.3x random (bar 3x) in every
    MoE layer, no expert above 3.6x the mean load (bar 4x), MTP greedy acceptance >= 0.5."""
    return (
        min(ev[prefix + "overlap_over_random"]) >= 3.3
        and max(ev[prefix + "max_over_mean_load"]) <= 3.6
        and ev[prefix + "mtp_acceptance"] >= 0.5
    )


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


@torch.no_grad()
def evaluate(model: TinyMTP, data: torch.Tensor, seq: int, batch: int, amp: bool) -> dict:
    """Teacher-forced metrics on non-overlapping windows of `data` (token ids on the device)."""
    model.eval()
    n_win = (len(data) - 2) // seq
    starts = torch.arange(n_win, device=data.device) * seq
    c = model.c
    k, n_exp = c.num_experts_per_tok, c.n_routed_experts
    gates = model.gates()
    tot = {"main": 0.0, "mtp": 0.0, "top1": 0.0, "accept": 0.0, "n": 0, "n_acc": 0}
    loads = torch.zeros(len(gates), n_exp, device=data.device)
    overlap = torch.zeros(len(gates), device=data.device)
    for s in range(0, n_win, batch):
        idx = starts[s : s + batch, None] + torch.arange(seq + 2, device=data.device)
        tokens = data[idx]  # [B, T+2]
        x, y, z = tokens[:, :-2], tokens[:, 1:-1], tokens[:, 2:]
        with torch.autocast(data.device.type, torch.bfloat16, enabled=amp):
            logits, logits2 = model(x, y)  # [B, T, V] each
            hidden_inds = [g.last_inds.view(*x.shape, k) for g in gates]  # [B, T, k] each
        lp, lp2 = logits.float().log_softmax(-1), logits2.float().log_softmax(-1)
        tot["main"] -= lp.gather(-1, y[..., None]).sum().item()
        tot["mtp"] -= lp2.gather(-1, z[..., None]).sum().item()
        pred, pred2 = logits.argmax(-1), logits2.argmax(-1)  # [B, T]
        tot["top1"] += (pred == y).sum().item()
        tot["accept"] += (pred2[:, :-1] == pred[:, 1:]).sum().item()
        tot["n"] += y.numel()
        tot["n_acc"] += y[:, 1:].numel()
        for li, inds in enumerate(hidden_inds):
            loads[li] += torch.bincount(inds.flatten(), minlength=n_exp)
            same = (inds[:, 1:, :, None] == inds[:, :-1, None, :]).any(-1).sum(-1)  # [B, T-1]
            overlap[li] += same.sum() / k / (x.shape[1] - 1)
    model.train()
    n_windows = n_win
    main, mtp = tot["main"] / tot["n"], tot["mtp"] / tot["n"]
    return {
        "loss": main + MTP_WEIGHT * mtp,
        "main_loss": main,
        "mtp_loss": mtp,
        "top1": tot["top1"] / tot["n"],
        "mtp_acceptance": tot["accept"] / tot["n_acc"],
        "overlap_over_random": (overlap / n_windows / (k / n_exp)).tolist(),
        "max_over_mean_load": (loads.max(1).values / loads.mean(1)).tolist(),
        "tokens": tot["n"],
    }


def train(a: argparse.Namespace) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    amp = dev.type == "cuda"
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokens = np.load(Path(a.data) / "train.npy").astype(np.int64)
    n_val = int(len(tokens) * a.val_frac)
    train_data = torch.from_numpy(tokens[:-n_val]).to(dev)
    val_data = torch.from_numpy(tokens[-n_val:]).to(dev)
    cfg = TinyConfig()
    model = TinyMTP(cfg, dropout=a.dropout)
    model.init_weights(a.seed)
    model.to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.wd}, {"params": other, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.95),
        fused=amp,
    )
    per_step = a.batch * a.seq
    total = int(a.epochs * len(train_data) / per_step)
    gates = model.gates()
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    log = (out / "metrics.jsonl").open("w")
    best, best_state, t0 = (True, math.inf), None, time.perf_counter()
    print(f"{out.name}: {total} steps of {per_step} tokens, {a.epochs} epochs", flush=True)
    for step in range(total):
        starts = torch.randint(
            0, len(train_data) - a.seq - 2, (a.batch,), generator=gen, device=dev
        )
        batch = train_data[starts[:, None] + torch.arange(a.seq + 2, device=dev)]  # [B, T+2]
        lr = lr_at(step, total, a.lr, a.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(dev.type, torch.bfloat16, enabled=amp):
            main, mtp, smooth, router_z = model.losses(batch)
        loss = main + MTP_WEIGHT * mtp + a.smooth * smooth + a.router_z * router_z
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for g in gates:
                load = g.last_load.float()  # [N]
                g.e_score_correction_bias += a.bias_rate * torch.sign(load.mean() - load)
        last = step + 1 == total or time.perf_counter() - t0 > a.time_limit_s
        if (step + 1) % a.eval_every == 0 or last:
            ev = evaluate(model, val_data, a.seq, a.eval_batch, amp)
            rec = {
                "step": step + 1,
                "epoch": (step + 1) * per_step / len(train_data),
                "elapsed_s": time.perf_counter() - t0,
                "lr": lr,
                "train_main": main.item(),
                "train_mtp": mtp.item(),
                "train_smooth": smooth.item(),
                "train_router_z": router_z.item(),
                "grad_norm": gnorm.item(),
                **{f"val_{k}": v for k, v in ev.items()},
            }
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(
                f"{out.name} step {step + 1}/{total} ep {rec['epoch']:.1f} "
                f"train {rec['train_main']:.3f}/{rec['train_mtp']:.3f} "
                f"val {ev['main_loss']:.3f}/{ev['mtp_loss']:.3f} top1 {ev['top1']:.3f} "
                f"acc {ev['mtp_acceptance']:.3f} ovl {min(ev['overlap_over_random']):.2f} "
                f"load {max(ev['max_over_mean_load']):.2f} {rec['elapsed_s']:.0f}s",
                flush=True,
            )
            # Best = meets the bars first, then lowest val loss (main + 0.3·MTP).
            key = (not meets_bars(ev), ev["loss"])
            if key < best:
                best, best_rec = key, rec
                best_state = {
                    k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()
                }
        if last:
            break
    log.close()
    torch.save(best_state, out / "best.pt")
    summary = {
        "best": best_rec,
        "steps_run": step + 1,
        "steps_planned": total,
        "tokens_per_step": per_step,
        "train_tokens": len(train_data),
        "val_tokens": n_val,
        "hyperparameters": vars(a),
        "config": asdict(cfg),
        "mtp_loss_weight": MTP_WEIGHT,
        "device": torch.cuda.get_device_name() if amp else "cpu",
        "torch": torch.__version__,
        "wall_s": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def select(a: argparse.Namespace) -> None:
    """Write the best run's weights as bf16 HF-named shards + every run's summary and log."""
    runs = []
    for r in map(Path, a.runs):
        if (r / "summary.json").exists():
            s = json.loads((r / "summary.json").read_text())
            s["log"] = [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()]
            runs.append((s["best"]["val_loss"], r, s))
    runs.sort(key=lambda t: (not meets_bars(t[2]["best"], "val_"), t[0]))
    _, best_dir, _ = runs[0]
    model = TinyMTP(TinyConfig())
    model.load_state_dict(torch.load(best_dir / "best.pt"))
    out = Path(a.out)
    shard: dict[str, torch.Tensor] = {}
    size, n = 0, 0
    items = list(hf_state_dict(model).items())
    for i, (name, t) in enumerate(items):
        # Router biases stay float32 (mlx-lm keeps them so too): they decide top-k ties.
        shard[name] = t if name.endswith("e_score_correction_bias") else t.to(torch.bfloat16)
        size += shard[name].numel() * shard[name].element_size()
        if size > SHARD_BYTES - 2**20 or i + 1 == len(items):
            torch.save(shard, out / f"tiny_torch.{n:02d}.pt")
            shard, size, n = {}, 0, n + 1
    meta = {"selected": best_dir.name, "runs": {r.name: s for _, r, s in runs}}
    (out / "runs.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"selected {best_dir.name} (val loss {runs[0][0]:.4f}); {n} shards")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True, help="folder with train.npy")
    t.add_argument("--out", required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--seq", type=int, default=512)
    t.add_argument("--epochs", type=float, default=20.0)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--wd", type=float, default=0.1)
    t.add_argument("--dropout", type=float, default=0.0)
    t.add_argument("--bias-rate", type=float, default=1e-3, help="u of the balance update")
    t.add_argument("--smooth", type=float, default=0.0, help="routing-smoothness weight")
    t.add_argument("--router-z", type=float, default=0.0, help="mean squared router logit weight")
    t.add_argument("--val-frac", type=float, default=0.05)
    t.add_argument("--eval-every", type=int, default=100)
    t.add_argument("--eval-batch", type=int, default=64)
    t.add_argument("--time-limit-s", type=float, default=420.0)
    s = sub.add_parser("select")
    s.add_argument("--runs", nargs="+", required=True)
    s.add_argument("--out", required=True)
    a = p.parse_args()
    train(a) if a.cmd == "train" else select(a)


if __name__ == "__main__":
    main()
