"""Speedup of speculative decoding when a verify pass costs the union of its experts.

Streaming-bound, a pass over γ positions reads the union U(γ) of their routed experts, so it
costs cost(γ) = U(γ)/U(1) plain passes (plus c per drafted token for a drafter of relative cost
c, default 0). It yields E(α, γ) = (1 − α^γ)/(1 − α) tokens, hence

    speedup(α, γ) = E(α, γ) / (cost(γ) + c·(γ − 1))
    ceiling(γ)    = γ / (cost(γ) + c·(γ − 1))                 (α = 1)
    break-even    the α in [0, 1] with E(α, γ) = cost(γ) + c·(γ − 1)

    from specdec.costmodel.speedup import speedup, break_even
    speedup(0.9, 8, 35.01 / 8)    # 1.301
    break_even(3, 17.99 / 8)      # 0.7243

Tests: `pytest tests/costmodel/test_costmodel.py`.
"""

from __future__ import annotations

import math

import numpy as np

from specdec.core.errors import SpecdecError


def check_alpha(alpha: float) -> None:
    if not (0.0 <= alpha <= 1.0):
        raise SpecdecError(f"acceptance α must be in [0, 1], got {alpha}")


def check_gamma(gamma: int) -> None:
    if int(gamma) != gamma or gamma < 1:
        raise SpecdecError(f"γ must be an integer ≥ 1 (1 is plain decoding), got {gamma}")


def expected_tokens(alpha: float | np.ndarray, gamma: int) -> float | np.ndarray:
    """E(α, γ) = 1 + α + … + α^(γ−1): tokens per verify pass (equals γ at α = 1).

    Summed as a polynomial rather than (1 − α^γ)/(1 − α) so α = 1 needs no special case.
    """
    a = np.asarray(alpha, dtype=float)
    total = sum(a**i for i in range(gamma))
    return float(total) if np.ndim(total) == 0 else total


def pass_cost(gamma: int, cost: float, draft_cost: float = 0.0) -> float:
    """Cost of one pass in plain passes: union cost plus the drafter's c per drafted token."""
    if draft_cost < 0:
        raise SpecdecError(f"draft cost must be ≥ 0 (fraction of a plain pass), got {draft_cost}")
    if not (cost > 0 and math.isfinite(cost)):
        raise SpecdecError(f"pass cost at γ={gamma} must be positive, got {cost}")
    return cost + draft_cost * (gamma - 1)


def speedup(alpha: float, gamma: int, cost: float, draft_cost: float = 0.0):
    """E(α, γ) / pass cost; α may be an array (for curves)."""
    check_gamma(gamma)
    return expected_tokens(alpha, gamma) / pass_cost(gamma, cost, draft_cost)


def ceiling(gamma: int, cost: float, draft_cost: float = 0.0) -> float:
    """Speedup with a draft that is never wrong (α = 1)."""
    return float(speedup(1.0, gamma, cost, draft_cost))


def solve_acceptance(gamma: int, tokens: float) -> float | None:
    """The α in [0, 1] with E(α, γ) = tokens, by root finding; None if no such α.

    E rises strictly from 1 (α = 0) to γ (α = 1) for γ ≥ 2, so the root is unique when
    1 ≤ tokens ≤ γ.
    """
    check_gamma(gamma)
    if gamma == 1 or not (1.0 <= tokens <= gamma):
        return None
    from scipy.optimize import brentq  # here: scipy takes a second to import (--help)

    return float(brentq(lambda a: expected_tokens(a, gamma) - tokens, 0.0, 1.0, xtol=1e-14))


def measured_break_even(points: list[tuple[float, float]]) -> float | None:
    """Break-even from measured (α, speed-up) points sorted by α: the smallest α from which the
    speed-up stays at or above 1, interpolated linearly into the last step that crosses it; the
    lowest α where every point is at or above 1; None where the highest α is still below 1."""
    if not points or points[-1][1] < 1:
        return None
    i = len(points) - 1
    while i > 0 and points[i - 1][1] >= 1:
        i -= 1
    if i == 0:
        return points[0][0]
    (a0, s0), (a1, s1) = points[i - 1], points[i]
    return a0 + (1 - s0) * (a1 - a0) / (s1 - s0)


def break_even_words(x: float | None, lo: float, hi: float) -> str:
    """`measured_break_even`'s answer over α from `lo` to `hi`, in words (tables, reports)."""
    if x is None:
        return f"above {hi:g} (below 1x at α {hi:g})"
    return f"{x:.2f}" + (f" or lower (at or above 1x from α {lo:g})" if x == lo else "")


def break_even(gamma: int, cost: float, draft_cost: float = 0.0) -> float | None:
    """Acceptance below which γ loses to plain decoding.

    None at γ = 1 (nothing to break even) and when even α = 1 loses (ceiling < 1); 0.0 when the
    pass costs less than a plain one (it never loses). Closed form at γ = 2 (E = 1 + α), root
    finding otherwise.
    """
    check_gamma(gamma)
    total = pass_cost(gamma, cost, draft_cost)
    if gamma == 1 or total > gamma:
        return None
    if total <= 1.0:
        return 0.0
    if gamma == 2:
        return total - 1.0
    return solve_acceptance(gamma, total)


def best_gamma(
    alpha: float, cost_by_gamma: dict[int, float], draft_cost: float = 0.0
) -> tuple[int, float]:
    """(γ, speedup) maximising speedup at α over the given γ; γ = 1 (speedup 1) always competes.

    Ties go to the smaller γ: same speed for fewer drafted tokens.
    """
    check_alpha(alpha)
    best = (1, 1.0)
    for g in sorted(cost_by_gamma):
        s = float(speedup(alpha, g, cost_by_gamma[g], draft_cost))
        if s > best[1] + 1e-12:
            best = (g, s)
    return best
