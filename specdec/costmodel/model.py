"""A union table turned into costs, ceilings, break-even acceptances and best γ per acceptance.

`build_union_model` is what `specdec union-model` prints and what sweep reports call with
measured tables:

    from specdec.costmodel.model import build_union_model
    m = build_union_model({1: 8, 2: 13.42, 3: 17.99, 8: 35.01}, alphas=[0.8, 0.9, 1.0])
    m.to_dict()["alphas"][1]["speedup"]     # 1.301 at α = 0.9, γ = 8

γ asked for but absent from the table take their union from one of the fits (`fill`, linear by
default) and say so in `source`. Tests: `pytest tests/costmodel/test_costmodel.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specdec.core.errors import SpecdecError
from specdec.costmodel.speedup import best_gamma, break_even, ceiling, check_alpha, check_gamma
from specdec.costmodel.speedup import speedup as speedup_at
from specdec.costmodel.union import (
    LinearFit,
    OverlapFit,
    PowerFit,
    UnionFit,
    UnionTable,
    fit_linear,
    fit_overlap,
    fit_power,
)

FILLS = ("linear", "power", "overlap")
MAX_TABLE_GAMMA = 1024  # widest γ tabulated: far past any drafter, and each costs O(γ)


@dataclass(frozen=True)
class GammaRow:
    gamma: int
    union: float
    source: str  # "measured" or "<fit>_fit"
    cost: float  # pass cost in plain passes, draft cost included
    ceiling: float  # speedup at α = 1
    break_even: float | None  # α below which this γ loses; None at γ = 1 or ceiling < 1


@dataclass(frozen=True)
class AlphaRow:
    alpha: float
    best_gamma: int
    speedup: float
    speedup_by_gamma: dict[int, float]


@dataclass(frozen=True)
class UnionModel:
    k: float
    u1: float  # U(1) the costs divide by: measured if the table has γ = 1, else k
    draft_cost: float
    fill: str
    linear: LinearFit
    power: PowerFit
    overlap: OverlapFit
    overlap_measured: OverlapFit | None  # the overlap model at the measured ρ, if one was given
    gammas: list[GammaRow]
    alphas: list[AlphaRow]

    @property
    def cost_by_gamma(self) -> dict[int, float]:
        """Union cost U(γ)/U(1) per γ, without the drafter (speedup functions add it)."""
        return {r.gamma: r.union / self.u1 for r in self.gammas}

    @property
    def break_even_any(self) -> float | None:
        """Lowest break-even over γ > 1: below it every γ of the table loses to plain decoding."""
        values = [r.break_even for r in self.gammas if r.break_even is not None]
        return min(values) if values else None

    def to_dict(self) -> dict:
        def fit_dict(f: UnionFit, **params) -> dict:
            return {
                **params,
                "rmse": f.rmse,
                "residuals": {str(g): r for g, r in f.residuals.items()},
            }

        def overlap_dict(f: OverlapFit) -> dict:
            return fit_dict(f, rho=f.rho, rho_source=f.rho_source, n_experts=f.n_experts)

        fits = {
            "linear": fit_dict(self.linear, slope=self.linear.slope),
            "power": fit_dict(self.power, exponent=self.power.exponent),
            "overlap": overlap_dict(self.overlap),
        }
        if self.overlap_measured is not None:
            fits["overlap_measured"] = overlap_dict(self.overlap_measured)
        return {
            "k": self.k,
            "draft_cost": self.draft_cost,
            "fits": fits,
            "gammas": [asdict(r) for r in self.gammas],
            "break_even_any_gamma": self.break_even_any,
            "alphas": [
                {
                    "alpha": r.alpha,
                    "best_gamma": r.best_gamma,
                    "speedup": r.speedup,
                    "speedup_by_gamma": {str(g): s for g, s in r.speedup_by_gamma.items()},
                }
                for r in self.alphas
            ],
        }


def build_union_model(
    table: UnionTable,
    alphas: list[float],
    k: float | None = None,
    gammas: list[int] | None = None,
    fill: str = "linear",
    n_experts: int | None = None,
    rho: float | None = None,
    draft_cost: float = 0.0,
) -> UnionModel:
    """Fit `table`, then cost, ceiling and break-even per γ and the best γ per α.

    k defaults to U(1) of the table; cost(γ) = U(γ)/U(1) uses the table's U(1) when measured,
    else k. `gammas` defaults to the table's γ (γ = 1 is always added); `n_experts` bounds the
    overlap model; `rho` adds the overlap model at that measured ρ beside the fitted one.
    """
    if fill not in FILLS:
        raise SpecdecError(f"unknown fill {fill!r}: use one of {', '.join(FILLS)}")
    linear = fit_linear(table, k)
    k = linear.k  # fit_linear has checked the table and k
    for a in alphas:
        check_alpha(a)
    fits = {
        "linear": linear,
        "power": fit_power(table, k),
        "overlap": fit_overlap(table, k, n_experts),
    }
    measured = fit_overlap(table, k, n_experts, rho) if rho is not None else None
    wanted = sorted(set(gammas or table) | {1})
    for g in wanted:
        check_gamma(g)
        if g > MAX_TABLE_GAMMA:  # E(α, γ) sums γ terms and is solved for α per γ
            raise SpecdecError(
                f"γ={g} is beyond {MAX_TABLE_GAMMA} positions per verify pass: tabulate "
                f"γ from 1 to {MAX_TABLE_GAMMA} (--gammas, --union)"
            )
    u1 = table.get(1, k)

    rows = []
    for g in wanted:
        union, source = (
            (table[g], "measured") if g in table else (fits[fill].union(g), f"{fill}_fit")
        )
        cost = union / u1
        rows.append(
            GammaRow(
                gamma=g,
                union=union,
                source=source,
                cost=cost + draft_cost * (g - 1),
                ceiling=ceiling(g, cost, draft_cost),
                break_even=break_even(g, cost, draft_cost),
            )
        )
    union_cost = {r.gamma: r.union / u1 for r in rows}
    alpha_rows = []
    for a in alphas:
        g_best, s_best = best_gamma(a, union_cost, draft_cost)
        by_gamma = {g: float(speedup_at(a, g, c, draft_cost)) for g, c in union_cost.items()}
        alpha_rows.append(AlphaRow(a, g_best, s_best, by_gamma))
    return UnionModel(
        k=k,
        u1=u1,
        draft_cost=draft_cost,
        fill=fill,
        linear=linear,
        power=fits["power"],
        overlap=fits["overlap"],
        overlap_measured=measured,
        gammas=rows,
        alphas=alpha_rows,
    )


def format_text(m: UnionModel) -> str:
    """A readable report: fits, then one row per γ, then one row per α."""
    lines = [
        f"k = {m.k:g} experts per token"
        + (f", draft cost {m.draft_cost:g}" if m.draft_cost else "")
    ]
    lines.append("fits (least squares on U):")
    for f in (m.linear, m.power, m.overlap, m.overlap_measured):
        if f is not None:
            res = "  ".join(f"{g}:{r:+.2f}" for g, r in f.residuals.items())
            lines.append(f"  {f.label():<40} rmse {f.rmse:6.3f}   residuals {res}")
    lines.append("")
    lines.append(
        f"{'γ':>3} {'union':>8} {'source':>12} {'cost':>7} {'ceiling':>8} {'break-even α':>13}"
    )
    for r in m.gammas:
        be = "—" if r.break_even is None else f"{r.break_even:.4f}"
        lines.append(
            f"{r.gamma:>3} {r.union:>8.2f} {r.source:>12} {r.cost:>7.4f} {r.ceiling:>7.4f}x {be:>13}"
        )
    if m.break_even_any is not None:
        lines.append(f"every γ > 1 of this table loses below α = {m.break_even_any:.4f}")
    lines.append("")
    gs = [r.gamma for r in m.gammas]
    head = " ".join(f"{'γ=' + str(g):>7}" for g in gs)
    lines.append(f"{'α':>5} {'best γ':>6} {'speedup':>8}   {head}")
    for r in m.alphas:
        cells = " ".join(f"{r.speedup_by_gamma[g]:>6.3f}x" for g in gs)
        lines.append(f"{r.alpha:>5.2f} {r.best_gamma:>6} {r.speedup:>7.4f}x   {cells}")
    return "\n".join(lines)
