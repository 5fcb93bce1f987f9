"""Shared basis: are a layer's experts W_e = B + Δ_e with small Δ_e, or near-orthogonal?

    rows = basis_table("tiny")                 # any model: bundled name, mlx-lm or packed dir
    write_basis(rows, "runs/probes")           # basis.{md,json,png}
    specdec probe basis --model tiny --out runs/probes
    basis_stats(W)                             # W [E, d] float: the numbers for one matrix

Per MoE layer and per projection (gate_proj, up_proj, down_proj, and `all` = the three
flattened and concatenated per expert), the experts are read straight from the packed
experts.bin, dequantized with mx.dequantize when quantized, and flattened into W [E, d]:
- mean pairwise cosine between distinct experts' rows;
- residual norm share ||W - mean_e W_e||_F / ||W||_F: what is left to stream if the mean
  expert B were kept resident (1.0 = the mean explains nothing);
- rank for 50/83/95% energy: the fewest singular values of the stacked, uncentred W whose
  squares hold that share of ||W||_F² (computed from the E x E Gram matrix, exact).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.probes.registry import Probe, ProbeOutput, register
from specdec.store.layout import EXPERTS_BIN, ExpertIndex, LayerLayout
from specdec.store.safetensors import mx_dtype

ENERGY = (0.50, 0.83, 0.95)


def basis_stats(W: np.ndarray) -> dict:
    """Cosine, residual share and energy ranks of one stack of flattened experts W [E, d]."""
    W = W.astype(np.float64)
    E = W.shape[0]
    G = W @ W.T  # [E, E]
    norms = np.sqrt(np.maximum(np.diag(G), 1e-300))
    cos = G / np.outer(norms, norms)
    mean_cos = float((cos.sum() - np.trace(cos)) / (E * (E - 1))) if E > 1 else 1.0
    centred = W - W.mean(0, keepdims=True)
    residual = float(np.linalg.norm(centred) / max(np.linalg.norm(W), 1e-300))
    energy = np.sort(np.clip(np.linalg.eigvalsh(G), 0, None))[::-1]  # σ² descending
    cum = np.cumsum(energy) / max(energy.sum(), 1e-300)
    ranks = {
        f"rank_{int(round(100 * f))}": int(np.searchsorted(cum, f - 1e-12) + 1) for f in ENERGY
    }
    return {"mean_cosine": mean_cos, "residual_norm_share": residual, **ranks, "n_experts": E}


def expert_matrices(packed: Path, index: ExpertIndex, lid: int) -> dict[str, np.ndarray]:
    """{projection: [E, d] float32} of one MoE layer, dequantized, read from experts.bin."""
    ly: LayerLayout = index.layers[lid]
    raw = np.memmap(packed / EXPERTS_BIN, dtype=np.uint8, mode="r")
    out = {}
    for proj in ly.projections:
        rows = []
        for e in range(ly.n_experts):
            base = int(ly.offsets[e])
            t = {}
            for spec in ly.tensors:
                if spec.projection == proj:
                    buf = np.array(raw[base + spec.offset : base + spec.offset + spec.nbytes])
                    part = spec.name.rsplit(".", 1)[1]
                    t[part] = mx.array(buf).view(mx_dtype(spec.dtype)).reshape(spec.shape)
            q = ly.quant.get(proj)
            if q is not None:
                w = mx.dequantize(
                    t["weight"], t["scales"], t.get("biases"), q.group_size, q.bits, mode=q.mode
                )
            else:
                w = t["weight"]
            rows.append(np.array(w.astype(mx.float32)).reshape(-1))
        out[proj] = np.stack(rows)  # [E, d]
    return out


def basis_table(model: str | Path) -> list[dict]:
    """One row per (MoE layer, projection, and `all` concatenated)."""
    from specdec.stream.loader import ensure_packed, resolve

    packed = ensure_packed(resolve(model))
    index = ExpertIndex.load(packed)
    n_main = json.loads((packed / "config.json").read_text()).get("num_hidden_layers")
    rows = []
    for lid in index.layer_ids:
        if n_main is not None and lid >= n_main:
            continue  # the MTP layer's experts: not part of the main model's layers
        mats = expert_matrices(packed, index, lid)
        mats["all"] = np.concatenate([mats[p] for p in sorted(mats)], axis=1)
        for proj, W in mats.items():
            rows.append(
                {"layer": lid, "projection": proj, "dim": int(W.shape[1]), **basis_stats(W)}
            )
    return rows


def render_basis(rows: list[dict], title: str = "") -> str:
    from specdec.probes.report import md_table

    body = md_table(
        [
            "layer",
            "projection",
            "mean pairwise cosine",
            "norm left after mean",
            "rank 50%",
            "rank 83%",
            "rank 95%",
            "of E",
        ],
        [
            [
                r["layer"],
                r["projection"],
                f"{r['mean_cosine']:+.3f}",
                f"{r['residual_norm_share']:.1%}",
                r["rank_50"],
                r["rank_83"],
                r["rank_95"],
                r["n_experts"],
            ]
            for r in rows
        ],
    )
    return (f"{title}\n\n" if title else "") + body


def write_basis(rows: list[dict], out_dir: str | Path, title: str = "") -> dict:
    import matplotlib.pyplot as plt

    from specdec.probes.report import write_report

    alls = [r for r in rows if r["projection"] == "all"]
    layers = [r["layer"] for r in alls]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    a1.plot(layers, [r["mean_cosine"] for r in alls], marker="o", label="mean pairwise cosine")
    a1.plot(
        layers, [r["residual_norm_share"] for r in alls], marker="s", label="norm left after mean"
    )
    a1.set_ylim(-0.05, 1.05)
    a1.set_ylabel("cosine / share of norm")
    a1.set_title("experts vs their mean (all projections)")
    for f in ("50", "83", "95"):
        a2.plot(
            layers,
            [r[f"rank_{f}"] / r["n_experts"] for r in alls],
            marker="o",
            label=f"{f}% energy",
        )
    a2.set_ylim(0, 1.05)
    a2.set_ylabel("rank needed / number of experts")
    a2.set_title("rank of the stacked experts (uncentred SVD)")
    for ax in (a1, a2):
        ax.set_xticks(layers)
        ax.set_xlabel("model layer")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return write_report(out_dir, "basis", rows, render_basis(rows, title), fig)


@register
class Basis(Probe):
    """Whether a layer's experts share a basis (cosines, residual after the mean, energy ranks),
    read straight from the packed experts.bin."""

    name = "basis"
    listed = 40
    needs = ("model",)
    options = ("model",)

    @classmethod
    def run(cls, opts, ctx) -> ProbeOutput:
        rows = basis_table(opts.model)
        title = f"Shared basis of {opts.model}'s experts."
        return ProbeOutput(rows, write_basis(rows, opts.out, title))
