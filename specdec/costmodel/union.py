"""Fits of the expert union U(γ) of one verify pass: linear, power law, and consecutive overlap.

U(γ) is, per MoE layer, the number of distinct routed experts selected across the γ positions of
one verify pass. A table {γ: mean union} (U(1) = k for top-k routing) is fitted three ways:

    linear   U = k·(1 + s·(γ − 1))          the seed question's model, s by least squares
    power    U = k·γ^p                       p by least squares on U
    overlap  U = N − (N − k)·(1 − k(1 − ρ)/(N − k))^(γ − 1)   (derived in `overlap_union`)

Every fit is least squares on U itself (not on log U) so the rmse of the three compare directly.

    from specdec.costmodel.union import fit_linear
    fit_linear({1: 8, 2: 13.42, 3: 17.99, 8: 35.01}).slope   # 0.4965

Tests: `pytest tests/costmodel/test_costmodel.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specdec.core.errors import SpecdecError

UnionTable = dict[int, float]  # γ -> mean union over layers and passes


@dataclass(frozen=True)
class UnionFit:
    """A fitted U(γ): `predict` gives the model, residuals and rmse compare it with `table`."""

    k: float  # U(1): experts per token
    table: UnionTable  # what was fitted

    name = "union"

    def predict(self, gamma: np.ndarray | float) -> np.ndarray:
        raise NotImplementedError

    def union(self, gamma: int) -> float:
        return float(self.predict(gamma))

    @property
    def residuals(self) -> dict[int, float]:
        """Measured minus model, per γ of the table."""
        return {g: u - self.union(g) for g, u in sorted(self.table.items())}

    @property
    def rmse(self) -> float:
        r = np.array(list(self.residuals.values()))
        return float(np.sqrt(np.mean(r**2)))

    def label(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class LinearFit(UnionFit):
    """U = k·(1 + s·(γ − 1)): every new position adds s·k new experts (s = 1: no sharing)."""

    slope: float
    name = "linear"

    def predict(self, gamma: np.ndarray | float) -> np.ndarray:
        return self.k * (1.0 + self.slope * (np.asarray(gamma, dtype=float) - 1.0))

    def label(self) -> str:
        return f"linear: k(1+{self.slope:.3f}(γ−1))"


@dataclass(frozen=True)
class PowerFit(UnionFit):
    """U = k·γ^p: sub-linear growth (p < 1) when positions share experts."""

    exponent: float
    name = "power"

    def predict(self, gamma: np.ndarray | float) -> np.ndarray:
        return self.k * np.asarray(gamma, dtype=float) ** self.exponent

    def label(self) -> str:
        return f"power: kγ^{self.exponent:.3f}"


@dataclass(frozen=True)
class OverlapFit(UnionFit):
    """The one-step-overlap (Markov) model; `rho_source` says whether ρ was fitted or measured."""

    rho: float
    n_experts: int | None  # None: unbounded pool, the model is then linear with slope 1 − ρ
    rho_source: str  # "fit" | "measured"
    name = "overlap"

    def predict(self, gamma: np.ndarray | float) -> np.ndarray:
        return overlap_union(np.asarray(gamma, dtype=float), self.k, self.rho, self.n_experts)

    def label(self) -> str:
        pool = f", N={self.n_experts}" if self.n_experts else ""
        return f"overlap: ρ={self.rho:.3f} ({self.rho_source}{pool})"


def overlap_union(gamma: np.ndarray, k: float, rho: float, n_experts: int | None) -> np.ndarray:
    """Expected union after γ positions when only consecutive tokens share experts.

    Derivation. Token t + 1 keeps ρ·k of token t's experts (already in the union) and picks
    (1 − ρ)·k "fresh" ones, i.e. experts outside token t's set. Assumption (the Markov
    approximation): the fresh ones are drawn uniformly from the N − k experts token t did not
    use, with no memory of tokens before t. Of those N − k, N − U_t are outside the union, so

        U_{t+1} = U_t + (1 − ρ)·k·(N − U_t)/(N − k).

    With D_t = N − U_t this is D_{t+1} = D_t·(1 − k(1 − ρ)/(N − k)), D_1 = N − k, hence

        U(γ) = N − (N − k)·(1 − k(1 − ρ)/(N − k))^(γ − 1),

    which saturates at N. (Drawing fresh experts from all N instead of N − k gives the same form
    with N in the denominator; that over-counts overlap with token t, which fresh experts cannot
    have.) As N → ∞ it becomes U = k·(1 + (1 − ρ)(γ − 1)): linear with slope 1 − ρ. Overlap with
    tokens before t (recurring hot experts) makes the real union grow slower than this model, so
    with the measured ρ it is an upper estimate; a fitted ρ above the measured one measures how
    much reuse reaches past the previous token.
    """
    if n_experts is None:
        return k * (1.0 + (1.0 - rho) * (gamma - 1.0))
    decay = 1.0 - k * (1.0 - rho) / (n_experts - k)
    return n_experts - (n_experts - k) * decay ** (gamma - 1.0)


def check_table(table: UnionTable, k: float) -> None:
    """SpecdecError unless γ ≥ 1 are integers, unions positive, k positive and finite."""
    if not (k > 0 and math.isfinite(k)):
        raise SpecdecError(f"k must be a positive number of experts per token, got {k}")
    if not table:
        raise SpecdecError("the union table is empty: give at least one γ:union pair")
    for g, u in table.items():
        if int(g) != g or g < 1:
            raise SpecdecError(f"γ must be an integer ≥ 1 (1 is plain decoding), got {g}")
        if not (u > 0 and math.isfinite(u)):
            raise SpecdecError(f"union at γ={g} must be a positive number of experts, got {u}")


def _k_of(table: UnionTable, k: float | None) -> float:
    if k is not None:
        return float(k)
    if 1 not in table:
        raise SpecdecError("no γ=1 entry to take k from: pass k (experts per token) explicitly")
    return float(table[1])


def _spread(table: UnionTable) -> tuple[np.ndarray, np.ndarray]:
    gammas = np.array(sorted(table), dtype=float)  # [n]
    unions = np.array([table[int(g)] for g in gammas], dtype=float)  # [n]
    if not (gammas > 1).any():
        raise SpecdecError("the union table needs at least one γ > 1 to fit how the union grows")
    return gammas, unions


def fit_linear(table: UnionTable, k: float | None = None) -> LinearFit:
    """Least squares slope s of U = k·(1 + s·(γ − 1)) with k fixed (k = U(1) by default)."""
    k = _k_of(table, k)
    check_table(table, k)
    gammas, unions = _spread(table)
    x = gammas - 1.0  # [n]
    slope = float(np.sum(x * (unions - k)) / (k * np.sum(x**2)))
    return LinearFit(k=k, table=dict(table), slope=slope)


def _least_squares_1d(table: UnionTable, model, lo: float, hi: float) -> float:
    from scipy.optimize import minimize_scalar  # here: scipy takes a second to import (--help)

    gammas, unions = _spread(table)
    res = minimize_scalar(
        lambda p: float(np.sum((unions - model(gammas, p)) ** 2)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(res.x)


def fit_power(table: UnionTable, k: float | None = None) -> PowerFit:
    """Least squares exponent p of U = k·γ^p, p in [0, 2]."""
    k = _k_of(table, k)
    check_table(table, k)
    p = _least_squares_1d(table, lambda g, p: k * g**p, 0.0, 2.0)
    return PowerFit(k=k, table=dict(table), exponent=p)


def fit_overlap(
    table: UnionTable,
    k: float | None = None,
    n_experts: int | None = None,
    rho: float | None = None,
) -> OverlapFit:
    """The overlap model of `overlap_union`: ρ by least squares, or the measured `rho` if given."""
    k = _k_of(table, k)
    check_table(table, k)
    if n_experts is not None and n_experts <= k:
        raise SpecdecError(
            f"n_experts={n_experts} must exceed k={k:g}: pass the layer's expert count"
        )
    if rho is not None:
        if not 0.0 <= rho <= 1.0:
            raise SpecdecError(f"overlap ρ must be a share in [0, 1], got {rho}")
        return OverlapFit(
            k=k, table=dict(table), rho=float(rho), n_experts=n_experts, rho_source="measured"
        )
    fitted = _least_squares_1d(table, lambda g, r: overlap_union(g, k, r, n_experts), 0.0, 1.0)
    return OverlapFit(k=k, table=dict(table), rho=fitted, n_experts=n_experts, rho_source="fit")
