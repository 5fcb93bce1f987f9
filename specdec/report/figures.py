"""Report figure (c): union of real verify batches against the union along the committed trace.

Figures (a) and (b) are `specdec.costmodel.plots`' own; this one adds the comparison the seed
question could not make: its table was measured along the produced trace, which rejected drafts
never join.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specdec.costmodel.plots import _save, plt
from specdec.report.sections import Setting

_MARKERS = "osD^vP*X"


def plot_verify_vs_trace(st: Setting, path: Path) -> Path:
    trace = st.trace
    gammas = sorted(trace)
    per_layer = [np.array(list(trace[g].per_layer.values())) for g in gammas]
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    ax.fill_between(
        gammas,
        [v.min() for v in per_layer],
        [v.max() for v in per_layer],
        color="0.85",
        label="trace: per-layer min–max",
    )
    ax.plot(
        gammas,
        [trace[g].mean for g in gammas],
        "-",
        color="black",
        lw=1.8,
        label="trace: mean over layers",
    )
    n = st.n_experts or float("inf")
    ax.plot(
        gammas,
        [min(st.k * g, n) for g in gammas],
        ":",
        color="0.5",
        label=f"no sharing: min({st.k}·γ, N = {st.n_experts})",
    )
    drafters = sorted({r["drafter"] for r in st.trace_rows})
    for i, d in enumerate(drafters):
        rows = sorted((r for r in st.trace_rows if r["drafter"] == d), key=lambda r: r["gamma"])
        # acceptance None: a job that drafted nothing (drafter=none at γ > 1)
        acc = ", ".join(
            f"γ={r['gamma']}: α={'-' if r['acceptance'] is None else format(r['acceptance'], '.2f')}"
            for r in rows
        )
        # side by side at each γ: drafters with the same union would hide each other
        shift = 0.12 * (i - (len(drafters) - 1) / 2)
        ax.plot(
            [r["gamma"] + shift for r in rows],
            [r["verify_union"] for r in rows],
            _MARKERS[i % len(_MARKERS)],
            ms=8,
            mec="black",
            label=f"verify, {d} ({acc})",
        )
    ax.set_xlabel("γ (positions per verify pass; γ−1 drafted tokens)")
    ax.set_ylabel("distinct experts per MoE layer per pass")
    ax.set_xticks(gammas)
    ax.set_title(
        "Real verify batches vs the union along the committed trace\n"
        f"(points: each drafter's verify passes, α = acceptance; {st.label})",
        fontsize=11,
    )
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
