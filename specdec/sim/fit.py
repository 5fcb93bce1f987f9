"""Fit the synthetic generator's parameters to measured routing statistics.

    specdec trace fit --like minimax-m2.5                       # the preset's own targets
    specdec trace fit --like minimax-m2.5 --targets t.json      # other targets, same shape
    specdec trace fit --targets t.json --json                   # shape from the file

    from specdec.sim.fit import fit
    result = fit(targets, shape)       # FitResult: params, proxy and replayed statistics

Targets (a JSON file; every statistic optional but one):
    {"shape": {"n_layers": 62, "n_experts": 256, "top_k": 8, "expert_bytes": 7962624},
     "overlap": 0.33, "union": {"2": 13.42, "3": 17.99, "8": 35.01},
     "budget": "9GB", "lru": 0.53, "static": 0.45, "positions": 2000}

The loop never replays the full trace: each evaluation generates `FIT_LAYERS` layers of
`positions` positions (layers are independent and identically distributed, so fewer layers are
the same statistics with more noise) and measures overlap and unions exactly, the static bound
as the fractional knapsack over those layers' counts at the budget scaled to them, and LRU with a
per-layer proxy (each layer an LRU of budget / L slots, interpolated between the two whole
numbers around it). Nelder-Mead on the squared misses in units of the tolerances, from a fixed
start with a fixed seed: deterministic. Then one full trace is generated and replayed through
specdec.sim.simulate (LRU one cache over all layers, the knapsack bound); where the replayed
LRU or static differs from its proxy, the proxy's target is shifted by the difference and the
fit runs once more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specdec.core.progress import progress
from specdec.sim.bounds import knapsack_counts
from specdec.sim.stats import overlap_per_layer, trace_stats, union_per_layer
from specdec.trace.synthetic import SynthParams, Targets, TraceShape, generate, generate_experts

FIT_LAYERS = 8
FIT_POSITIONS = 2000  # at most, per evaluation (the replayed check uses the targets' positions)
TOLERANCE = {"overlap": 0.03, "union": 0.05, "lru": 0.03, "static": 0.03}  # union: relative
MAX_ROUNDS, STEP, GOOD_LOSS = 4, 0.5, 0.25  # GOOD_LOSS: every statistic within ~tol / 4
NM_OPTIONS = {"xatol": 1e-3, "fatol": 1e-2, "maxfev": 120}
START = SynthParams(skew=0.9, reuse=0.1, history=0.3, window=3.0)


@dataclass
class FitResult:
    params: SynthParams
    proxy: dict  # the loop's statistics at the fitted parameters
    replayed: dict  # trace_stats of one full generated trace
    evaluations: int


def proxy_stats(shape: TraceShape, targets: Targets, params: SynthParams, seed: int = 0) -> dict:
    """The loop's statistics: FIT_LAYERS layers, exact overlap/unions, proxy lru/static."""
    L, T = min(FIT_LAYERS, shape.n_layers), min(FIT_POSITIONS, targets.positions)
    e = generate_experts(T, L, shape.n_experts, shape.top_k, params, seed)
    runs = [(0, len(e))]
    out = {
        "overlap": float(overlap_per_layer(e, runs).mean()),
        "union": {g: float(union_per_layer(e, runs, g).mean()) for g in targets.union},
    }
    if targets.budget_slots is not None:
        per_layer = targets.budget_slots / shape.n_layers
        out["lru"] = per_layer_lru(e, shape.n_experts, per_layer)
        counts = np.stack(
            [np.bincount(e[:, i].ravel(), minlength=shape.n_experts) for i in range(L)]
        )
        hits, _ = knapsack_counts(counts.ravel(), np.ones(counts.size), per_layer * L)
        out["static"] = hits / e.size
    return out


def per_layer_lru(experts: np.ndarray, n_experts: int, slots: float) -> float:
    """Hit rate of one LRU of `slots` (fractional: interpolated) per layer; experts [T, L, k].

    Recency of an expert = (last position used) · E + expert id: within a position the higher
    id counts as newer, as ExpertCache admits a step's keys in ascending order."""
    T, L, k = experts.shape
    lo = int(slots)
    rows = np.arange(L)[:, None]  # [L, 1]
    last = np.full((L, n_experts), -1, dtype=np.int64)  # [L, E]
    ids = np.arange(n_experts)[None, :]  # [1, E]
    hits = np.zeros(2)
    sizes = [min(n, n_experts) for n in (lo, lo + 1) if n > 0]  # 0 slots: no hits
    for t in range(T):
        rec = np.where(last >= 0, last * n_experts + ids, -1)  # [L, E]
        srt = -np.sort(-rec, axis=1)  # [L, E] descending
        r = rec[rows, experts[t]]  # [L, k]
        for j, n in enumerate(sizes, start=2 - len(sizes)):
            thresh = srt[:, n - 1 : n]  # [L, 1]: the n-th newest
            hits[j] += ((r >= thresh) & (r >= 0)).sum()
        last[rows, experts[t]] = t
    rate = hits / experts.size
    return float(rate[0] + (slots - lo) * (rate[1] - rate[0]))


def loss(stats: dict, targets: Targets) -> float:
    """Squared misses in units of the tolerances."""
    s = 0.0
    for name in ("overlap", "lru", "static"):
        want = getattr(targets, name)
        if want is not None:
            s += ((stats[name] - want) / TOLERANCE[name]) ** 2
    for g, want in targets.union.items():
        s += ((stats["union"][g] - want) / (TOLERANCE["union"] * want)) ** 2
    return s


def _params(x: np.ndarray) -> SynthParams:
    """Unconstrained vector -> parameters in range (softplus, logistic, 1 + softplus)."""
    softplus = np.log1p(np.exp(x))
    return SynthParams(
        skew=float(softplus[0]),
        reuse=float(0.95 / (1.0 + np.exp(-x[1]))),
        history=float(1.0 / (1.0 + np.exp(-x[2]))),
        window=float(1.0 + softplus[3]),
    )


def _vector(p: SynthParams) -> np.ndarray:
    """Inverse of _params (ends of ranges pulled in so it stays finite)."""

    def logit(v: float) -> float:
        v = min(max(v, 1e-4), 1 - 1e-4)
        return float(np.log(v / (1.0 - v)))

    def inv_softplus(v: float) -> float:
        return float(np.log(np.expm1(max(v, 1e-4))))

    return np.array(
        [inv_softplus(p.skew), logit(p.reuse / 0.95), logit(p.history), inv_softplus(p.window - 1)]
    )


def _nelder_mead(shape: TraceShape, targets: Targets, start: SynthParams, seed: int):
    """Nelder-Mead restarted from its best point (a fresh simplex of steps 0.5) until a round
    gains little: one round alone often stalls on this noisy, stepwise loss."""
    from scipy.optimize import minimize  # only fitting needs scipy

    def f(x):
        return loss(proxy_stats(shape, targets, _params(x), seed), targets)

    x, best, evals = _vector(start), np.inf, 0
    for _ in progress(range(MAX_ROUNDS), desc="trace fit", unit="round"):
        simplex = np.vstack([x, x + STEP * np.eye(len(x))])  # [5, 4]
        res = minimize(
            f, x, method="Nelder-Mead", options={"initial_simplex": simplex, **NM_OPTIONS}
        )
        evals += int(res.nfev)
        gain, x, best = best - res.fun, res.x, min(best, res.fun)
        if best < GOOD_LOSS or gain < 0.1 * best:
            break
    return _params(x), evals


def fit(
    targets: Targets, shape: TraceShape, start: SynthParams = START, seed: int = 0
) -> FitResult:
    """Fit, replay one full trace, correct the lru/static proxies once where they miss."""
    params, n = _nelder_mead(shape, targets, start, seed)
    proxy = proxy_stats(shape, targets, params, seed)
    replayed = replay_stats(shape, targets, params, seed)
    shift = {
        name: replayed[name] - proxy[name]
        for name in ("lru", "static")
        if getattr(targets, name) is not None
        and abs(replayed[name] - getattr(targets, name)) > TOLERANCE[name] / 3
    }
    if shift:
        adjusted = replace(
            targets, **{name: getattr(targets, name) - d for name, d in shift.items()}
        )
        params, m = _nelder_mead(shape, adjusted, params, seed)
        n += m
        proxy = proxy_stats(shape, targets, params, seed)
        replayed = replay_stats(shape, targets, params, seed)
    return FitResult(params, proxy, replayed, n)


def replay_stats(shape: TraceShape, targets: Targets, params: SynthParams, seed: int = 0) -> dict:
    """trace_stats of one full generated trace (LRU and static replayed at the budget)."""
    trace = generate(shape, params, targets.positions, seed)
    budget = None if targets.budget_slots is None else f"{targets.budget_slots}slots"
    s = trace_stats(trace, budget, gammas=sorted({1, *targets.union}))
    s["union"] = {int(g): v for g, v in s["union"].items()}
    return s
