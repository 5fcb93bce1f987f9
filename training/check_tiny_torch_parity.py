"""Check that the PyTorch `tiny` model and its mlx-lm export compute the same function (float32).

    python -m training.check_tiny_torch_parity                          # random weights only
    python -m training.check_tiny_torch_parity --weights out/round3 \
        --heldout runs/tiny/heldout.npy                                    # + the trained weights

1. Random weights (init std 0.1, random router biases and norm gains, so routing, RoPE and MLA
   all matter): training/tiny_torch_model.py in float32 vs the MLX model that
   training/export_tiny_torch.build_mlx makes from its HF-named weights (mlx-lm's sanitize,
   `deepseek_v3.Model`, `specdec.checkpoint.mtp.MTPModule`), before quantization. Main and MTP logits
   must agree within --tol (1e-4) absolute, and every router's top-k must be the same.
2. Control: the same MLX model with RoPE switched to `traditional=False` must NOT agree (so the
   check can tell rotary layouts apart); it fails the run if it does.
3. With --weights: the trained weights on --windows held-out windows; reports max |Δlogit| and
   greedy agreement (routing near-ties may flip a few top-k choices here, so this is reported,
   not asserted).
Prints one JSON object; exit status 1 when (1) or (2) fails. Needs torch (CPU) and MLX.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

from training.export_tiny_torch import build_mlx, read_shards
from training.tiny_torch_model import TinyConfig, TinyMTP, hf_state_dict, load_hf_state_dict


class _Recorder(nn.Module):
    """Wraps an mlx-lm MoEGate and keeps the indices of its last call."""

    def __init__(self, gate: nn.Module):
        super().__init__()
        self.gate = gate
        object.__setattr__(self, "inds", None)

    def __call__(self, x):
        inds, scores = self.gate(x)
        object.__setattr__(self, "inds", inds)
        return inds, scores


def _mlx_forward(model, mtp, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = model.model(mx.array(x))  # [B, T, H] after the final norm
    logits2, _ = mtp(hidden, mx.array(y), embed=model.model.embed_tokens, head=model.lm_head)
    return np.array(model.lm_head(hidden)), np.array(logits2)  # [B, T, V] each


def _pair(tm: TinyMTP, x: np.ndarray, y: np.ndarray) -> dict:
    """Torch vs MLX (built from tm's weights) on tokens x and next tokens y."""
    with torch.no_grad():
        t_main, t_mtp = (t.numpy() for t in tm(torch.from_numpy(x), torch.from_numpy(y)))
    t_inds = [np.sort(g.last_inds.numpy(), -1) for g in tm.gates()]  # [B·T, k] each
    model, mtp, _ = build_mlx({k: v.numpy() for k, v in hf_state_dict(tm).items()}, tm.c)
    mlps = [layer.mlp for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    mlps.append(mtp.layer.mlp)
    for m in mlps:
        m.gate = _Recorder(m.gate)
    m_main, m_mtp = _mlx_forward(model, mtp, x, y)
    m_inds = [
        np.sort(np.array(m.gate.inds).reshape(-1, tm.c.num_experts_per_tok), -1) for m in mlps
    ]
    same = [float((a == b).all(-1).mean()) for a, b in zip(t_inds, m_inds, strict=True)]
    return {
        "max_abs_diff_main": float(np.abs(t_main - m_main).max()),
        "max_abs_diff_mtp": float(np.abs(t_mtp - m_mtp).max()),
        "logit_std_main": float(t_main.std()),
        "greedy_agreement_main": float((t_main.argmax(-1) == m_main.argmax(-1)).mean()),
        "greedy_agreement_mtp": float((t_mtp.argmax(-1) == m_mtp.argmax(-1)).mean()),
        "same_topk_fraction_per_moe_layer": same,
        "_models": (model, mtp),
    }


def random_model(cfg: TinyConfig, seed: int) -> TinyMTP:
    tm = TinyMTP(cfg)
    tm.init_weights(seed, std=0.1)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in tm.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
        for gate in tm.gates():
            gate.e_score_correction_bias.copy_(0.3 * torch.randn(cfg.n_routed_experts, generator=g))
    return tm.eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", help="folder with tiny_torch.NN.pt shards (train select output)")
    p.add_argument("--heldout", help="held-out token ids (.npy) for the trained check")
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    cfg = TinyConfig()
    rng = np.random.default_rng(a.seed)
    tokens = rng.integers(0, cfg.vocab_size, size=(2, 65))  # [B, T+1]
    x, y = tokens[:, :-1], tokens[:, 1:]
    rand = _pair(random_model(cfg, a.seed), x, y)
    model, mtp = rand.pop("_models")
    ok = (
        max(rand["max_abs_diff_main"], rand["max_abs_diff_mtp"]) <= a.tol
        and min(rand["same_topk_fraction_per_moe_layer"]) == 1.0
    )
    # Control: the non-interleaved RoPE layout must be detected.
    for layer in [*model.model.layers, mtp.layer]:
        layer.self_attn.rope = nn.RoPE(cfg.qk_rope_head_dim, traditional=False, base=cfg.rope_theta)
    with torch.no_grad():
        t_main, _ = random_model(cfg, a.seed)(torch.from_numpy(x), torch.from_numpy(y))
    control = float(np.abs(t_main.numpy() - _mlx_forward(model, mtp, x, y)[0]).max())
    report = {"tol": a.tol, "random": rand, "control_rope_not_traditional_max_diff": control}
    ok = ok and control > 100 * a.tol
    if a.weights:
        tm = TinyMTP(cfg)
        load_hf_state_dict(
            tm, {k: torch.from_numpy(v) for k, v in read_shards(Path(a.weights)).items()}
        )
        held = np.load(a.heldout)
        starts = np.linspace(0, len(held) - a.seq - 2, a.windows).astype(np.int64)
        win = np.stack([held[s : s + a.seq + 1] for s in starts])  # [W, T+1]
        trained = _pair(tm.eval(), win[:, :-1], win[:, 1:])
        trained.pop("_models")
        report["trained"] = {**trained, "windows": a.windows, "seq": a.seq}
    report["pass"] = ok
    print(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
