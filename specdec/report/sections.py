"""The report's numbers for one setting (model, cache, device, tokens): three sections.

(a) union vs γ per source, the committed trace's union and each drafter's real verify batches,
    with the fits of `specdec.costmodel` (linear k·(1 + s·(γ − 1)), power law, the overlap model
    fitted and at the overlap ρ measured between consecutive tokens) and their residuals;
(b) speedup vs acceptance: measured points against the γ = 1 jobs, the model curve per γ from
    the measured verify unions, break-even acceptance per γ, best γ per acceptance;
(c) the union of real verify batches against the union along the committed trace.

Pure computation on `collect.Job`s; `specdec.report` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.costmodel.model import UnionModel, build_union_model
from specdec.costmodel.speedup import speedup as model_speedup
from specdec.report.collect import Job


@dataclass
class UnionSource:
    name: str  # "trace" or "verify: DRAFTER"
    per_layer: dict[int, list[float]]  # γ -> mean union of each MoE layer
    model: UnionModel | None  # None without a γ > 1 to fit

    @property
    def mean(self) -> dict[int, float]:
        return {g: float(np.mean(v)) for g, v in sorted(self.per_layer.items())}

    def rows(self) -> list[dict]:
        """Per γ: mean union, per-layer spread, and each fit's prediction."""
        fits = _fits(self.model)
        out = []
        for g, v in sorted(self.per_layer.items()):
            row = {
                "gamma": g,
                "mean_union": float(np.mean(v)),
                "layer_min": float(min(v)),
                "layer_max": float(max(v)),
            }
            row.update({fit_key(f): f.union(g) for f in fits})
            out.append(row)
        return out

    def fit_rows(self) -> list[dict]:
        return [
            {
                "fit": f.label(),
                "rmse": f.rmse,
                **{f"residual_g{g}": r for g, r in f.residuals.items()},
            }
            for f in _fits(self.model)
        ]


def fit_key(f) -> str:
    """Column name of a fit: linear, power, overlap_fit, overlap_measured."""
    if f.name == "overlap":
        return f"overlap_{'measured' if f.rho_source == 'measured' else 'fit'}"
    return f.name


def _fits(m: UnionModel | None) -> list:
    if m is None:
        return []
    return [f for f in (m.linear, m.power, m.overlap, m.overlap_measured) if f is not None]


@dataclass
class Setting:
    label: str
    jobs: list[Job]
    alphas: list[float]
    sources: list[UnionSource] = field(default_factory=list)
    rho: float | None = None  # measured overlap between consecutive tokens of the trace
    cost_model: UnionModel | None = None  # from the pooled verify unions, for (b)
    speedup_rows: list[dict] = field(default_factory=list)
    trace_rows: list[dict] = field(default_factory=list)
    figures: dict[str, Path] = field(default_factory=dict)  # filled by the renderer

    @property
    def k(self) -> int:
        return int(self.jobs[0].model["top_k"])

    @property
    def n_experts(self) -> int | None:
        return self.jobs[0].model.get("n_experts")

    @property
    def trace(self) -> dict | None:
        return next((j.trace for j in self.jobs if j.trace), None)

    def job_rows(self) -> list[dict]:
        """One row per job, with its speed-up against the setting's γ = 1 jobs (None: no γ = 1
        job, or bytes not comparable)."""
        plain = [j.summary["bytes_per_token"] for j in self.jobs if j.gamma == 1]
        base = float(np.mean(plain)) if plain else None
        rows = []
        for j in self.jobs:
            s = j.summary
            bpt = s["bytes_per_token"]
            rows.append(
                {
                    "drafter": j.drafter,
                    "gamma": j.gamma,
                    "passes": s["passes"],
                    "committed": s["committed"],
                    "acceptance": s["acceptance"],
                    "accepted_per_drafted": s["accepted_per_drafted"],
                    "mean_accepted_length": s["mean_accepted_length"],
                    "tokens_per_pass": s["committed"] / s["passes"],
                    "mean_union": s["mean_union"],
                    "bytes_per_token": s["bytes_per_token"],
                    "hit_rate": s["hit_rate"],
                    "tokens_per_s": s["tokens_per_s"],
                    f"modeled_tokens_per_s/{j.profile}": j.modeled_tps,
                    "speedup_vs_plain": base / bpt if base and bpt else None,
                }
            )
        return rows


def build_setting(label: str, jobs: list[Job], alphas: list[float]) -> Setting:
    st = Setting(label, jobs, sorted(set(alphas)))
    trace = st.trace
    st.rho = next((j.rho for j in jobs if j.rho is not None), None)
    if trace:
        st.sources.append(
            _source(st, "trace", {g: list(t.per_layer.values()) for g, t in trace.items()})
        )
    plain = [j for j in jobs if j.gamma == 1]
    for drafter in sorted({j.drafter for j in jobs if j.speculative}):
        per_layer = {
            j.gamma: list(j.per_layer_union.values())
            for j in jobs
            if j.drafter == drafter and j.speculative
        }
        if plain:
            per_layer[1] = list(np.mean([list(p.per_layer_union.values()) for p in plain], axis=0))
        st.sources.append(_source(st, f"verify: {drafter}", per_layer))
    _speedup(st, plain)
    _trace_rows(st)
    return st


def _source(st: Setting, name: str, per_layer: dict[int, list[float]]) -> UnionSource:
    src = UnionSource(name, dict(sorted(per_layer.items())), None)
    if any(g > 1 for g in per_layer):
        src.model = build_union_model(
            src.mean, st.alphas, k=st.k, n_experts=st.n_experts, rho=st.rho
        )
    return src


def _speedup(st: Setting, plain: list[Job]) -> None:
    """Measured speedup of each drafting job over the mean of the setting's γ = 1 jobs."""
    spec = [j for j in st.jobs if j.speculative and j.summary["acceptance"] is not None]
    if not plain or not spec:
        return
    unions: dict[int, list[float]] = {1: [p.summary["mean_union"] for p in plain]}
    for j in spec:
        unions.setdefault(j.gamma, []).append(j.summary["mean_union"])
    table = {g: float(np.mean(v)) for g, v in unions.items()}
    st.cost_model = build_union_model(table, st.alphas, k=st.k, n_experts=st.n_experts, rho=st.rho)
    cost = st.cost_model.cost_by_gamma
    base_bpt = float(np.mean([p.summary["bytes_per_token"] for p in plain]))
    base_tps = [p.modeled_tps for p in plain if p.modeled_tps]
    for j in spec:
        s, a = j.summary, j.summary["acceptance"]
        predicted = float(model_speedup(a, j.gamma, cost[j.gamma]))
        measured = base_bpt / s["bytes_per_token"]
        st.speedup_rows.append(
            {
                "drafter": j.drafter,
                "gamma": j.gamma,
                "acceptance": a,
                "tokens_per_pass": s["committed"] / s["passes"],
                "mean_union": s["mean_union"],
                "bytes_per_token": s["bytes_per_token"],
                "speedup_bytes": measured,
                "model_speedup": predicted,
                "residual": measured - predicted,
                f"speedup_modeled/{j.profile}": (j.modeled_tps / float(np.mean(base_tps)))
                if base_tps and j.modeled_tps
                else None,
            }
        )


def _trace_rows(st: Setting) -> None:
    trace = st.trace
    if not trace:
        return
    for j in st.jobs:
        if j.speculative and j.gamma in trace:
            t = trace[j.gamma].mean
            st.trace_rows.append(
                {
                    "drafter": j.drafter,
                    "gamma": j.gamma,
                    "acceptance": j.summary["acceptance"],
                    "verify_union": j.summary["mean_union"],
                    "trace_union": t,
                    "ratio": j.summary["mean_union"] / t,
                }
            )
