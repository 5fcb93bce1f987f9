"""Figures of the union cost model: union vs γ with fits, and speedup vs acceptance.

    from specdec.costmodel.plots import plot_union_vs_gamma, plot_speedup_vs_acceptance
    plot_union_vs_gamma({1: 8, 2: [13.1, 13.7], 8: 35.0}, [fit_linear(t)], "union.png")
    plot_speedup_vs_acceptance([(0.85, 3, 1.12)], {1: 1, 2: 1.68, 3: 2.25}, "speedup.png")

Matplotlib with the Agg backend (no display); files written to a temporary name then renamed.
`specdec union-model --plot DIR` draws the second one for any table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from specdec.core.files import write_with
from specdec.costmodel.speedup import break_even, speedup  # noqa: E402
from specdec.costmodel.union import UnionFit  # noqa: E402

_FIT_STYLES = {"linear": "-", "power": "--", "overlap": "-."}


def _save(fig, path: str | Path) -> Path:
    try:  # a temporary name of this process's own: concurrent reports of one directory
        return write_with(
            path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        )
    finally:
        plt.close(fig)


def plot_union_vs_gamma(
    measured: dict[int, Sequence[float] | float],
    fits: Sequence[UnionFit],
    path: str | Path,
    title: str = "Experts read by one verify pass",
) -> Path:
    """Mean union per γ with its per-layer spread (min–max bar, layers as dots), fit curves,
    the no-sharing line k·γ, and a residual panel (measured mean − fit)."""
    gammas = sorted(measured)
    per_layer = {g: np.atleast_1d(np.asarray(measured[g], dtype=float)) for g in gammas}
    means = np.array([per_layer[g].mean() for g in gammas])  # [n_gamma]
    fig, (ax, res_ax) = plt.subplots(
        2, 1, figsize=(7.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    rng = np.random.default_rng(0)  # jitter only, so layers at one γ do not overlap
    for g in gammas:
        v = per_layer[g]
        if v.size > 1:
            ax.scatter(g + rng.uniform(-0.08, 0.08, v.size), v, s=6, color="0.6", alpha=0.5, lw=0)
            ax.vlines(g, v.min(), v.max(), color="0.35", lw=1.5)
    has_spread = any(per_layer[g].size > 1 for g in gammas)
    ax.plot(gammas, means, "o", color="black", ms=7, zorder=5, label="measured mean")
    if has_spread:
        ax.plot([], [], "|", color="0.35", ms=10, label="per-layer min–max (dots: layers)")
    grid = np.linspace(1, max(gammas), 200)
    # the y range is the data's and the fits', not the no-sharing line's: k·γ far above the
    # measured unions would squash them into the bottom of the panel (the line is clipped)
    top = max(
        [float(per_layer[g].max()) for g in gammas] + [float(f.predict(grid).max()) for f in fits]
    )
    if fits:
        k = fits[0].k
        ax.plot(grid, k * grid, ":", color="0.5", label=f"no sharing: {k:g}·γ (clipped)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, f in enumerate(fits):
        style = _FIT_STYLES.get(f.name, "-")
        color = colors[i % len(colors)]
        ax.plot(
            grid,
            f.predict(grid),
            style,
            color=color,
            lw=1.8,
            # as many γ as the fit has free values: it passes through them, its rmse says nothing
            label=f"{f.label()}, "
            + (
                f"rmse {f.rmse:.2f}"
                if len(gammas) > 2
                else f"through {len(gammas)} points (no test)"
            ),
        )
        res = means - f.predict(np.array(gammas, dtype=float))
        res_ax.plot(gammas, res, style, marker="o", color=color, ms=5)
    res_ax.axhline(0, color="black", lw=0.8)
    ax.set_ylim(0.0, top * 1.15)
    ax.set_ylabel("distinct experts per layer")
    ax.set_title(title)
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(alpha=0.3)
    res_ax.set_xlabel("γ (positions per verify pass; γ−1 drafted tokens)")
    res_ax.set_ylabel("measured − fit\n(experts)")
    res_ax.grid(alpha=0.3)
    res_ax.set_xticks(range(1, max(gammas) + 1))
    fig.tight_layout()
    return _save(fig, path)


def plot_speedup_vs_acceptance(
    points: Sequence[tuple[float, int, float] | tuple[float, int, float, str]],
    cost_by_gamma: dict[int, float],
    path: str | Path,
    draft_cost: float = 0.0,
    title: str = "Streaming-bound speedup of speculative decoding",
) -> Path:
    """Model curves E(α, γ)/cost(γ) per γ > 1, the best-γ envelope, break-even markers on the
    1.0 line, and measured (α, γ, speedup[, label]) points in the colour of their γ, one marker
    shape per label (e.g. per drafter)."""
    alpha = np.linspace(0.0, 1.0, 401)  # [n_alpha]
    gammas = sorted(g for g in cost_by_gamma if g > 1)
    n = max(len(gammas), 1)
    # qualitative colours tell up to 10 curves apart; beyond that a sequential map orders them
    colors = plt.cm.tab10(np.arange(n)) if n <= 10 else plt.cm.viridis(np.linspace(0, 0.85, n))
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    ax.axhline(1.0, color="black", lw=1, label="plain decoding (γ = 1)")
    envelope = np.ones_like(alpha)
    for color, g in zip(colors, gammas, strict=False):  # colors has ≥ 1 entry
        curve = speedup(alpha, g, cost_by_gamma[g], draft_cost)  # [n_alpha]
        envelope = np.maximum(envelope, curve)
        be = break_even(g, cost_by_gamma[g], draft_cost)
        # the value goes in the legend: break-evens of different γ often nearly coincide, and
        # labels at the markers would overprint each other
        where = "never pays" if be is None else f"break-even α {be:.2f}"
        ax.plot(
            alpha,
            curve,
            color=color,
            lw=1.8,
            label=f"γ = {g}: cost {cost_by_gamma[g]:.2f}, {where}",
        )
        if be is not None:
            ax.plot(be, 1.0, "v", color=color, ms=9, mec="black", mew=0.6, zorder=5)
    ax.plot(alpha, envelope, color="crimson", lw=1, ls="--", label="best γ of these")
    labels = list(dict.fromkeys(p[3] if len(p) > 3 else "" for p in points))
    shapes = dict(zip(labels, "osD^PX*h", strict=False))
    for p in points:
        a, g, s = p[:3]
        color = colors[gammas.index(g)] if g in gammas else "black"
        marker = shapes.get(p[3] if len(p) > 3 else "", "o")
        ax.plot(a, s, marker, color=color, mec="black", ms=7, zorder=6)
    for label in labels:
        name = f"measured: {label}" if label else "measured"
        ax.plot([], [], shapes.get(label, "o"), color="white", mec="black", label=name)
    ax.plot([], [], "v", color="white", mec="black", label="break-even α")
    ax.set_xlim(0.0, 1.0)
    top = max(float(envelope.max()), max((p[2] for p in points), default=0.0))
    ax.set_ylim(0.0, top * 1.08)
    ax.set_xlabel("acceptance α (per-draft acceptance probability)")
    ax.set_ylabel("speedup over plain decoding (×)")
    sub = f", draft cost {draft_cost:g}/token" if draft_cost else ""
    ax.set_title(f"{title}\nspeedup = E(α, γ) / cost(γ), cost = U(γ)/U(1){sub}", fontsize=11)
    ax.legend(fontsize=9, loc="upper left")
    if points:  # why measured points sit below the curves: the model's cost is unions only
        ax.text(
            0.99, 0.02,
            "curves: every selected expert read once (unions only);\nmeasured points fall "
            "below them where a wider pass evicts\nexperts the next tokens read again (misses)",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="0.3",
        )  # fmt: skip
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
