"""Plain and speculative replay of a routing trace as one flat access sequence, and its policies.

    from specdec.sim.replay import replay_trace
    r = replay_trace(trace, "lru", budget_slots=1130, gamma=4, alpha=0.8, seed=0)
    r.bytes_per_token, r.hit_rate, r.mean_union

A verify pass of γ positions is, at each MoE layer in order, one cache step over the union of
the pass's experts at that layer (counts = positions selecting each key), then tick(γ): what the
streamed runtime does with a forward call of γ positions. α = 1: pass p covers trace positions
[pγ, pγ + γ). α < 1: each of the γ − 1 drafts is accepted with probability α until the first
rejection (seeded); a pass at t commits 1 + accepted positions and the next starts after them.
Its rejected positions route as the trace recorded a rejected draft there (rejected.npy, from
`specdec generate --records`, see specdec.decode.records.records_trace) or else as
`rejected_routing` models them: each expert of the previous position of the pass is kept with
the trace's own next-token overlap at that layer, the rest drawn without replacement from the
layer's expert popularity in the trace. γ = 1 is today's
plain replay (one position per forward call). Passes never cross a prompt boundary
(prompt_ids.npy); new_sequence() precedes the first pass of every prompt after the first.

Policies by name (the registered ones, the offline bounds, and `lcs:NAME` for libCacheSim's, see
specdec.sim.lcs):
the runtime's policies and Belady run as compiled loops equal to the Python classes
(specdec.sim.kernels); sieve, s3fifo and any policy with speculation-aware options
(lru+demote+protect, specdec.cache.speculative) run through the runtime's ExpertCache itself,
hearing each pass's verdict (specdec.sim.drive); `opt_bypass` is the offline optimum when misses may bypass the cache
(specdec.sim.bounds.opt_bypass_hits), a lower bound on the misses of every policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.cache.policies import policy_names
from specdec.cache.spec import OFFLINE, PolicySpec
from specdec.core.errors import BudgetError, SpecdecError
from specdec.trace.format import Trace, hotlist_keys, profile_hotlist

KERNEL_POLICIES = ("lru", "slru", "hotness", "lfu", "static")


@dataclass
class Access:
    """One replay's steps, flat. Step s is keys[ptr[s]:ptr[s + 1]] (sorted, distinct)."""

    keys: np.ndarray  # [N] int64, layer * n_experts + expert
    ptr: np.ndarray  # [S + 1] int64
    counts: np.ndarray  # [N] int64: positions of the call selecting the key
    tick: np.ndarray  # [S] int64: positions to tick after the step (a call's last step)
    new_seq: np.ndarray  # [S] bool: new_sequence() before the step
    n_keys: int  # L * n_experts
    committed: int  # positions committed by the passes
    passes: int
    # for the speculation-aware options' verdicts (specdec.sim.drive); None: from_steps
    routes: np.ndarray | None = None  # [P, γ, L, k] keys per pass position, -1 past its end
    plan: np.ndarray | None = None  # [P, 3] (first position, positions, accepted drafts)

    @property
    def widest(self) -> int:
        return int(np.diff(self.ptr).max(initial=0))

    @classmethod
    def from_steps(cls, steps: list[list[int]], n_keys: int | None = None) -> Access:
        """Plain steps (sorted distinct keys each), one position per step, counts 1."""
        keys = np.array([k for ks in steps for k in ks], dtype=np.int64)
        S = len(steps)
        return cls(
            keys=keys,
            ptr=np.r_[0, np.cumsum([len(ks) for ks in steps])].astype(np.int64),
            counts=np.ones(len(keys), np.int64),
            tick=np.ones(S, np.int64),
            new_seq=np.zeros(S, bool),
            n_keys=n_keys if n_keys is not None else int(keys.max(initial=-1)) + 1,
            committed=S,
            passes=S,
        )

    @classmethod
    def from_routes(cls, routes: np.ndarray, plan: np.ndarray, n_keys: int, new_seq=None) -> Access:
        """Verify passes: routes [P, γ, L, k] keys (-1 past a pass's end), plan [P, 3] (first
        position, positions, accepted drafts); new_seq [P]: a prompt starts at the pass."""
        P, gamma, L, k = routes.shape
        if gamma == 1:  # one position per call: its steps are its own experts
            keys = np.sort(routes, axis=-1).ravel()  # [P·L·k]
            ptr = np.arange(P * L + 1, dtype=np.int64) * k
            counts = np.ones(len(keys), np.int64)
        else:
            keys, ptr, counts = _union_steps(routes, n_keys)
        tick = np.zeros(P * L, np.int64)
        tick[L - 1 :: L] = plan[:, 1]
        starts = np.zeros(P * L, bool)
        starts[::L] = np.zeros(P, bool) if new_seq is None else new_seq
        return cls(
            keys=keys,
            ptr=ptr,
            counts=counts,
            tick=tick,
            new_seq=starts,
            n_keys=n_keys,
            committed=int(plan[:, 2].sum() + P),
            passes=P,
            routes=routes,
            plan=plan,
        )

    def steps(self) -> list[list[int]]:
        """The steps as lists (for the Python policy classes)."""
        return [s.tolist() for s in np.split(self.keys, self.ptr[1:-1])]


def check_distinct(trace: Trace) -> None:
    e = np.sort(trace.experts, axis=-1)  # [T, L, k]
    if e.shape[2] > 1 and (e[..., 1:] == e[..., :-1]).any():
        raise SpecdecError(
            "trace routes one expert twice at one position and layer: fix its writer"
        )


def prompt_starts(trace: Trace, T: int) -> np.ndarray:
    """Positions (after 0) where prompt_ids changes; [] without prompt_ids."""
    if trace.prompt_ids is None:
        return np.zeros(0, np.int64)
    pid = trace.prompt_ids[:T]
    return np.flatnonzero(pid[1:] != pid[:-1]) + 1


def plan_passes(T: int, gamma: int, alpha: float, seed: int, starts: np.ndarray) -> np.ndarray:
    """[P, 3] (first position, positions in the pass, accepted drafts) of every verify pass."""
    ends = [*starts.tolist(), T]  # a pass stops at the next prompt boundary
    # accepted drafts of pass i: successes before the first failure (capped at n - 1 below)
    geo = np.random.default_rng(seed).geometric(1.0 - alpha, T) - 1 if alpha < 1 else None
    rows, t, e = [], 0, 0
    draws = geo.tolist() if geo is not None else None
    while t < T:
        while ends[e] <= t:
            e += 1
        n = min(gamma, ends[e] - t)
        a = n - 1 if draws is None else min(draws[len(rows)], n - 1)
        rows.append((t, n, a))
        t += a + 1
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def routing_model(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(rho [L], logp [L, E]): the trace's mean next-token overlap per layer (shared experts / k)
    and log expert frequency per layer (-inf for experts it never routes to)."""
    e = trace.experts  # [T, L, k]
    T, L, _ = e.shape
    same = (e[1:, :, :, None] == e[:-1, :, None, :]).any(-1)  # [T - 1, L, k]
    rho = same.mean(axis=(0, 2)) if T > 1 else np.zeros(L)  # [L]
    freq = np.bincount(trace.keys().ravel(), minlength=L * trace.n_experts)
    freq = freq.reshape(L, trace.n_experts).astype(np.float64)  # [L, E]
    with np.errstate(divide="ignore"):
        return rho, np.log(freq / freq.sum(1, keepdims=True))


def rejected_routing(
    prev: np.ndarray, rho: np.ndarray, logp: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Routing of rejected draft positions, each conditioned on the position before it.

    prev [P, L, k]: the previous position's experts. Each is kept with probability rho[l]; the
    rest of the k are drawn without replacement (Gumbel top-k) from logp[l]. [P, L, k]."""
    P, L, k = prev.shape
    out = np.empty_like(prev)
    for c in range(0, P, 256):  # bounds the [c, L, E] scores' memory
        p = prev[c : c + 256]  # [c, L, k]
        keep = rng.random(p.shape) < rho[None, :, None]  # [c, L, k]
        score = logp[None] - np.log(-np.log(rng.random((len(p), L, logp.shape[1]))))  # [c, L, E]
        kept = np.where(keep, np.inf, -np.inf)  # kept experts win, the others compete
        np.put_along_axis(score, p, np.maximum(np.take_along_axis(score, p, -1), kept), -1)
        out[c : c + 256] = np.argpartition(-score, k - 1, axis=-1)[..., :k]  # [c, L, k]
    return out


def _routes(trace: Trace, e: np.ndarray, plan: np.ndarray, gamma: int, seed: int) -> np.ndarray:
    """[P, γ, L, k] keys (layer·E + expert) each pass's positions select; -1 past its end."""
    T, L, k = e.shape
    E = trace.n_experts
    P = len(plan)
    j = np.arange(gamma)
    pos = plan[:, :1] + j  # [P, γ]
    true = j <= plan[:, 2:3]  # [P, γ]: the pass's accepted positions and its first
    live = j < plan[:, 1:2]  # [P, γ]
    routes = np.full((P, gamma, L, k), -1, np.int64)  # [P, γ, L, k]
    routes[true] = e[pos[true]]
    rng = np.random.default_rng([seed, 1])
    rho, logp = routing_model(trace) if (~true & live).any() else (None, None)
    recorded = trace.rejected
    for i in range(1, gamma):  # rejected positions: recorded, else modelled on the one before
        rej = np.flatnonzero(live[:, i] & ~true[:, i])
        if recorded is not None and len(rej):
            rec = recorded[pos[rej, i]]  # [R, L, k]
            have = (rec >= 0).all(axis=(1, 2))
            routes[rej[have], i] = rec[have]
            rej = rej[~have]
        if len(rej):
            routes[rej, i] = rejected_routing(routes[rej, i - 1], rho, logp, rng)
    return np.where(routes >= 0, routes + np.arange(L)[:, None] * E, -1)


def _union_steps(routes: np.ndarray, n_keys: int):
    """(keys, ptr, counts) of passes routes [P, γ, L, k]: one step per layer over their union."""
    P, gamma, L, k = routes.shape
    big = n_keys
    x = np.where(routes >= 0, routes, big)  # [P, γ, L, k]
    x = np.sort(x.transpose(0, 2, 1, 3).reshape(P * L, gamma * k), axis=1)  # [S, γk]
    flat = (x + (np.arange(P * L) * (big + 1))[:, None]).ravel()  # rows stay sorted
    first = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    counts = np.diff(np.r_[first, len(flat)])
    step, keys = np.divmod(flat[first], big + 1)
    real = keys < big
    step, keys, counts = step[real], keys[real], counts[real]
    ptr = np.r_[0, np.cumsum(np.bincount(step, minlength=P * L))].astype(np.int64)
    return keys.astype(np.int64), ptr, counts.astype(np.int64)


def trace_routes(trace: Trace, alpha: float, positions: int | None) -> np.ndarray:
    """[T, L, k] int64 experts of `trace`'s first `positions`, after checking alpha and the trace."""
    if not 0.0 <= alpha <= 1.0:
        raise SpecdecError(f"alpha {alpha}: give an acceptance rate in [0, 1]")
    check_distinct(trace)
    return trace.experts[:positions].astype(np.int64)


def access_sequence(
    trace: Trace, gamma: int = 1, alpha: float = 1.0, seed: int = 0, positions: int | None = None
) -> Access:
    """The flat access sequence of replaying `trace` in verify passes of `gamma` positions."""
    if gamma < 1:
        raise SpecdecError(f"gamma {gamma}: give gamma >= 1 (1 is plain decoding)")
    e = trace_routes(trace, alpha, positions)  # [T, L, k]
    T, L, k = e.shape
    E = trace.n_experts
    starts = prompt_starts(trace, T)
    plan = plan_passes(T, gamma, alpha, seed, starts)  # [P, 3]
    if gamma == 1:  # one position per call
        routes = (e + np.arange(L)[:, None] * E)[:, None]  # [P, 1, L, k]
    else:
        routes = _routes(trace, e, plan, gamma, seed)  # [P, γ, L, k]
    return Access.from_routes(routes, plan, L * E, np.isin(plan[:, 0], starts))


def first_used(acc: Access, n: int) -> np.ndarray:
    """The n keys `acc` uses first: opt_bypass's free warm start (the optimal one)."""
    keys, first = np.unique(acc.keys, return_index=True)
    return keys[np.argsort(first, kind="stable")[:n]]


def policy_hits(
    policy: PolicySpec | str, acc: Access, n_slots: int, hotlist: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(hit [N] bool, keys preloaded before the first step) of one policy over `acc`."""
    spec = PolicySpec.parse(policy, offline=True)
    name = spec.name
    if n_slots < acc.widest:
        raise BudgetError(
            f"budget of {n_slots} slots is below the widest step ({acc.widest} experts): "
            f"use at least {acc.widest} slots"
        )
    hot = np.asarray(hotlist or [], np.int64)
    if name.startswith("lcs:"):
        from specdec.sim.lcs import lcs_hits

        return lcs_hits(name[4:], acc, n_slots), hot[:0]
    if spec.options or (spec.runtime and name not in KERNEL_POLICIES):  # the runtime's classes
        from specdec.sim.drive import drive_hits

        return drive_hits(spec, acc, n_slots, hotlist)
    from specdec.sim import kernels

    keys, ptr = acc.keys, acc.ptr
    if name == "lru":
        return kernels.lru_hits(keys, ptr, n_slots, acc.n_keys), hot[:0]
    if name == "slru":  # SLRU's default: 80% of the slots protected
        return kernels.slru_hits(keys, ptr, n_slots, acc.n_keys, round(0.8 * n_slots)), hot[:0]
    if name in ("hotness", "lfu"):
        hotness = name == "hotness"
        seed = np.zeros(acc.n_keys, np.int64)
        if hotness and len(hot):
            seed[hot] = len(hot) - np.arange(len(hot))  # rank r -> len - r, as CountPolicy
        pre = hot[:n_slots] if hotness else hot[:0]
        hit = kernels.count_hits(
            keys, ptr, acc.counts, acc.tick, acc.new_seq, n_slots, acc.n_keys,
            hotness, 16 if hotness else 0, seed, pre,
        )  # fmt: skip
        return hit, pre
    if name == "static":  # pins the hotlist's first n - widest keys, preloaded
        pinned = hot[: n_slots - max(1, min(acc.widest, n_slots))]
        return np.isin(keys, pinned), pinned
    if name == "belady":
        return kernels.belady_hits(keys, ptr, n_slots, acc.n_keys), hot[:0]
    if name == "opt_bypass":
        init = first_used(acc, n_slots)
        return kernels.bypass_opt_hits(keys, ptr, n_slots, acc.n_keys, init), init
    names = (*policy_names(), *OFFLINE[:2])  # knapsack_bound is simulate's, on counts
    raise SpecdecError(f"unknown policy {name!r}: use one of {', '.join(names)} or lcs:NAME")


@dataclass
class ReplayResult:
    """One (policy, budget, γ, α) replay."""

    policy: str
    budget_slots: int
    gamma: int
    alpha: float
    accesses: int  # sum of the steps' union sizes
    hits: float  # an int except for knapsack_bound (simulate), whose last key is fractional
    misses: float
    hit_rate: float
    bytes_read: float  # misses' expert bytes
    committed: int  # positions committed
    bytes_per_token: float  # bytes_read / committed
    mean_union: float  # accesses per step: mean per-layer union of a pass
    preload_bytes: int  # hotlist (or opt_bypass's free warm start) read before the first step
    passes: int


def result(
    name: str, acc: Access, n_slots: int, gamma: int, alpha: float, hits, read, preload_bytes=0
) -> ReplayResult:
    """A ReplayResult from hits and bytes read over `acc`."""
    n = len(acc.keys)
    return ReplayResult(
        policy=name,
        budget_slots=n_slots,
        gamma=gamma,
        alpha=alpha,
        accesses=n,
        hits=hits,
        misses=n - hits,
        hit_rate=hits / n if n else 0.0,
        bytes_read=float(read),
        committed=acc.committed,
        bytes_per_token=read / max(acc.committed, 1),
        mean_union=n / max(len(acc.ptr) - 1, 1),
        preload_bytes=preload_bytes,
        passes=acc.passes,
    )


def score(
    name: str, acc: Access, n_slots: int, trace: Trace, gamma: int, alpha: float, hit, preload
) -> ReplayResult:
    """A ReplayResult from a policy's hit [N] and preloaded keys over `acc`."""
    layer_bytes = np.asarray(trace.expert_bytes, np.int64)
    E = trace.n_experts
    read = float(layer_bytes[acc.keys[~hit] // E].sum())
    preloaded = int(layer_bytes[preload // E].sum())
    return result(name, acc, n_slots, gamma, alpha, int(hit.sum()), read, preloaded)


def replay_trace(
    trace: Trace,
    policy: PolicySpec | str,
    budget_slots: int,
    gamma: int = 1,
    alpha: float = 1.0,
    seed: int = 0,
    hotlist: list[int] | None = None,
    positions: int | None = None,
) -> ReplayResult:
    """Replay `trace` through one policy at one budget in verify passes of γ positions.
    hotlist (cache keys): seeds hotness and is pinned by static; static defaults to the trace's
    own profile (hindsight, like knapsack_bound)."""
    spec = PolicySpec.parse(policy, offline=True)
    acc = access_sequence(trace, gamma, alpha, seed, positions)
    if hotlist is None and spec.name == "static":
        hotlist = hotlist_keys(trace, profile_hotlist(trace))
    hit, pre = policy_hits(spec, acc, budget_slots, hotlist)
    return score(str(spec), acc, budget_slots, trace, gamma, alpha, hit, pre)
