"""Synthetic routing traces from a small generative model of a router, for the cache layer.

    from specdec.trace.synthetic import SynthParams, TraceShape, generate, synthetic_trace
    trace = synthetic_trace(n_positions=2000, n_layers=16, n_experts=64, top_k=8, seed=0)
    trace = generate(TraceShape(62, 256, 8, 7_962_624), SynthParams(0.92, 0.11, 0.28, 2.9), 2000)

The model, per MoE layer and position t (layers independent, same parameters; S_t is the set of
k experts position t routes to):

  popularity  π: Zipf weights 1/rank^skew over a random permutation of the layer's experts
  keep        each expert of S_{t-1} stays in S_t, independently, with probability `reuse`
  recent use  H_t: histogram of S_{t-1}, ..., S_{t-M} (M = ceil(window); S_{t-M} weighs
              window - M + 1, the others 1), normalised to sum 1
  fresh       the other k - kept experts are drawn without replacement (successive sampling,
              done as Gumbel top-k) from weights (1 - history)·π + history·H_t, kept ones out

`reuse` adds next-token overlap, `history` and `window` re-draws from the last few positions'
experts: reuse that reaches past the previous token but not far (the one-step model overpredicts
the union of 8 tokens, a fading memory that reaches far underpredicts it), `skew` the hot set a
static pinning can exploit. docs/trace-synth.md describes the model, the fit to measured
statistics (specdec.sim.fit) and the presets (specdec.trace.presets). Not a substitute for a recorded
trace when a number is reported about a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.progress import progress
from specdec.trace.format import Trace

_CHUNK = 128  # positions whose random numbers are drawn at once


@dataclass(frozen=True)
class TraceShape:
    """What a trace of a model looks like, independent of its routing statistics."""

    n_layers: int
    n_experts: int
    top_k: int
    expert_bytes: int
    layer_ids: tuple[int, ...] | None = None  # the model's layer index of each MoE layer


@dataclass(frozen=True)
class SynthParams:
    """The generator's parameters (see the module docstring)."""

    skew: float  # Zipf exponent of the per-layer popularity
    reuse: float  # probability that an expert of the previous position is kept
    history: float  # weight of the recent-use histogram in fresh draws
    window: float  # positions that histogram covers (fractional: the oldest counts partly)

    def check(self) -> None:
        ok = self.skew >= 0 and 0 <= self.reuse < 1 and 0 <= self.history <= 1
        if not (ok and self.window >= 1):
            raise SpecdecError(
                f"synthesis parameters out of range ({self}): need skew >= 0, 0 <= reuse < 1, "
                "0 <= history <= 1, window >= 1"
            )


def popularity(n_layers: int, n_experts: int, skew: float, rng: np.random.Generator) -> np.ndarray:
    """[L, E] per-layer Zipf popularity, each layer's ranks in a random expert order."""
    weight = 1.0 / np.arange(1, n_experts + 1) ** skew  # [E]
    probs = np.stack([rng.permutation(weight) for _ in range(n_layers)])  # [L, E]
    return probs / probs.sum(axis=1, keepdims=True)


def generate_experts(
    n_positions: int,
    n_layers: int,
    n_experts: int,
    top_k: int,
    params: SynthParams,
    seed: int,
) -> np.ndarray:
    """[T, L, k] int32 experts, each position's set sorted ascending."""
    params.check()
    if top_k > n_experts:
        raise SpecdecError(f"top_k {top_k} exceeds n_experts {n_experts}: fix the shape")
    rng = np.random.default_rng(seed)
    pi = popularity(n_layers, n_experts, params.skew, rng)  # [L, E]
    rows = np.arange(n_layers)[:, None]  # [L, 1]
    out = np.empty((n_positions, n_layers, top_k), dtype=np.int32)  # [T, L, k]
    M = int(np.ceil(params.window))  # positions the histogram reaches back
    frac = params.window - (M - 1)  # weight of the oldest of them, in (0, 1]
    ring = np.zeros((M, n_layers, n_experts), dtype=bool)  # [M, L, E]: ring[t % M] = S_t
    full = np.zeros((n_layers, n_experts))  # [L, E] sum of S over lags 1 .. M - 1
    h, log_pi = params.history, np.log(pi)
    for t in progress(range(n_positions), desc="trace synth", unit="pos"):
        if t % _CHUNK == 0:  # random numbers drawn in bulk: far faster than per position
            n = min(_CHUNK, n_positions - t)
            gumbel = rng.gumbel(size=(n, n_layers, n_experts))  # [n, L, E]
            coin = rng.random((n, n_layers, n_experts)) < params.reuse  # [n, L, E]
        key = gumbel[t % _CHUNK]  # [L, E]: Gumbel top-k of log weights = successive draws
        if t and h:
            hist = full + frac * ring[t % M]  # [L, E]; ring[t % M] holds S_{t-M}
            hist /= hist[0].sum()  # every layer's histogram holds the same number of entries
            with np.errstate(divide="ignore"):  # history 1: experts outside it weigh 0
                key = key + np.log((1.0 - h) * pi + h * hist)
        else:
            key = key + log_pi
        key[ring[(t - 1) % M] & coin[t % _CHUNK]] = np.inf  # kept experts of position t - 1
        chosen = np.argpartition(-key, top_k - 1, axis=1)[:, :top_k]  # [L, k]
        chosen.sort(axis=1)
        out[t] = chosen
        now = ring[t % M]
        now[:] = False
        now[rows, chosen] = True  # S_t replaces S_{t-M}
        full += now
        full -= ring[(t + 1) % M]  # S_{t-M+1} leaves lags 1 .. M - 1 (all False before it exists)
    return out


def generate(
    shape: TraceShape,
    params: SynthParams,
    n_positions: int,
    seed: int = 0,
    model: str = "synthetic",
) -> Trace:
    """A trace of `shape` from the generator; deterministic per seed."""
    if n_positions < 1:
        raise SpecdecError(f"positions {n_positions}: give at least 1")
    experts = generate_experts(
        n_positions, shape.n_layers, shape.n_experts, shape.top_k, params, seed
    )
    p = params
    return Trace(
        experts=experts,
        n_experts=shape.n_experts,
        expert_bytes=[shape.expert_bytes] * shape.n_layers,
        model=model,
        source=(
            f"specdec.trace.synthetic seed={seed} skew={p.skew:.4g} reuse={p.reuse:.4g} "
            f"history={p.history:.4g} window={p.window:.4g}"
        ),
        layer_ids=list(shape.layer_ids) if shape.layer_ids is not None else None,
    )


def synthetic_trace(
    n_positions: int,
    n_layers: int = 16,
    n_experts: int = 64,
    top_k: int = 8,
    *,
    skew: float = 0.8,
    reuse: float = 0.35,
    expert_bytes: int | list[int] = 1 << 20,
    seed: int = 0,
) -> Trace:
    """A small trace for tests and benchmarks: Zipf popularity plus one-step reuse, no history."""
    params = SynthParams(skew, reuse, history=0.0, window=1.0)
    trace = generate(TraceShape(n_layers, n_experts, top_k, 1), params, n_positions, seed)
    eb = expert_bytes
    trace.expert_bytes = [eb] * n_layers if isinstance(eb, int) else list(eb)
    return trace


@dataclass(frozen=True)
class Targets:
    """Measured statistics to fit; None where unknown. budget_slots is in the shape's slots."""

    overlap: float | None = None
    union: dict[int, float] = field(default_factory=dict)
    budget_slots: int | None = None
    lru: float | None = None
    static: float | None = None
    positions: int = 2000  # trace length the fit generates (lru and static depend on it a little)
