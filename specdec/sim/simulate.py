"""`specdec simulate`: replay a routing trace through the runtime's cache policies and bounds.

    specdec simulate runs/trace-x --policy lru,slru,hotness,lfu,static,belady,opt_bypass \
        --budget 96slots,2GB --json
    specdec simulate runs/trace-x --gamma 1,2,3,4,8 --alpha 1,0.9,0.8,0.7 --policy lru,lcs:ARC
    specdec simulate runs/trace-x --policy hotness,static --budget 1GB --hotlist hot.txt
    specdec simulate runs/trace-x --gamma 1,4,auto --alpha 0.8 --policy lru \
        --config model/config.json --profile m4-24gb

With --gamma 1 (default) each position of the trace is one forward call of one position: its
steps are the MoE layers in order (keys layer * n_experts + expert), then `tick(1)`. --gamma G
replays verify passes of G positions, one step per layer over the union of the pass's experts,
with acceptance --alpha (specdec.sim.replay says how rejected positions route). Policies run
as compiled loops equal to the runtime's ExpertCache and policy classes (specdec.sim.kernels,
tested access by access), or through ExpertCache itself: sieve, s3fifo, and any policy with
speculation-aware options (lru+demote+protect: specdec.cache.speculative, hearing each pass's
verdict); `lcs:NAME` runs libCacheSim's NAME on the same requests
(specdec.sim.lcs). Byte budgets become slots of the largest expert of any layer, a share
(`25%`) that share of the trace's L x E routed experts. Offline:
`belady` (MIN, every miss admitted), `opt_bypass` (the optimum when misses may bypass the
cache, with a free warm start: a bound on the misses of every policy, static included) and
`knapsack_bound` (any static pinning). `static` pins the hotlist given (--hotlist or
--hotlist-trace), else the trace's own profile (hindsight, like knapsack_bound), and keeps the
widest step as scratch. `hotness` is seeded and preloaded only from an explicit hotlist, and
starts over (new_sequence) where prompt_ids.npy changes prompt. --lookahead D (γ = 1) prefetches
the trace's router predictions (lookahead.npy) for layer l + D after the step of layer l, as
the runtime does, through the Python classes. bytes_read counts misses and prefetches; hotlist
preloads (and opt_bypass's warm start) are preload_bytes.

`--gamma auto` (specdec.gamma.chooser) chooses γ before each pass from the cache as it is, so its
rows replay pass by pass through the runtime's policy classes (specdec.gamma.replay), modeled
on --profile with the shapes of --config (a model's config.json, or `minimax-m2.5`); they add
modeled_tokens_per_s and gamma_hist (passes per γ). Runtime policies only (no bounds, no lcs:).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.spec import LCS_PREFIX, PolicySpec
from specdec.core.errors import BudgetError, SpecdecError
from specdec.core.progress import progress
from specdec.core.units import Budget, format_bytes
from specdec.sim.bounds import knapsack_counts
from specdec.sim.replay import (
    Access,
    ReplayResult,
    access_sequence,
    check_distinct,
    policy_hits,
    prompt_starts,
    result,
    score,
)
from specdec.trace.format import Trace, hotlist_keys, profile_hotlist


@dataclass
class SimResult:
    """One (γ, α, policy, budget) row of `specdec simulate --json`."""

    policy: str
    budget_slots: int
    budget_bytes: int
    accesses: int
    hits: float  # an int except for knapsack_bound, whose last expert is pinned fractionally
    misses: float
    hit_rate: float
    bytes_read: float  # bytes read during the replay: misses, plus prefetches with lookahead
    bytes_per_token: float  # bytes_read per committed position
    positions: int  # positions the passes ran (rejected drafts included)
    gamma: int | str = 1  # positions per verify pass, or "auto"
    alpha: float = 1.0  # draft acceptance
    committed: int = 0  # positions committed
    mean_union: float = 0.0  # accesses per step: the mean per-layer union of a pass
    preload_bytes: int = 0  # hotlist preloads (opt_bypass: its warm start), before the first step
    lookahead: int = 0  # router lookahead distance replayed (0: none)
    prefetch_bytes: float = 0.0  # part of bytes_read
    prefetch_hits: int = 0  # prefetched experts a later step used (counted as hits)
    prefetch_wasted: int = 0  # prefetched experts evicted unused
    hotlist: str = (
        ""  # "given" (--hotlist/--hotlist-trace) or "self" (static: this trace's profile)
    )
    modeled_tokens_per_s: float | None = None  # auto rows: on gamma_auto_profile
    gamma_hist: list[int] | None = None  # auto rows: passes per γ (index γ)
    gamma_auto_profile: str | None = None  # auto rows: the profile auto priced passes on


def trace_steps(trace: Trace, positions: int | None = None) -> list[list[list[int]]]:
    """[position][layer] -> sorted distinct keys: the steps of each one-position forward call."""
    check_distinct(trace)
    return np.sort(trace.keys()[:positions], axis=-1).tolist()  # [T, L, k]


def lookahead_steps(trace: Trace, distance: int, positions: int | None = None):
    """[position][layer] -> keys to prefetch after that layer's step: the trace's prediction of
    layer l + d made from layer l's input (lookahead.npy), [] where l + d is past the last."""
    if distance not in trace.lookahead_distances:
        have = ", ".join(map(str, trace.lookahead_distances)) or "none"
        raise SpecdecError(
            f"trace has no lookahead at distance {distance} (has: {have}): record it with "
            "lookahead or drop --lookahead"
        )
    pred = trace.lookahead[trace.lookahead_distances.index(distance), :positions]  # [T, L, k]
    T, L, _ = pred.shape
    layer = np.arange(L, dtype=np.int64)[None, :, None] * trace.n_experts
    keys = np.where(pred >= 0, pred + layer, -1)[:, distance:]  # [T, L - d, k]: target layers
    empty = [[] for _ in range(min(distance, L))]
    # -1: no prediction (the recorder had none for that layer)
    return [[sorted({k for k in ks if k >= 0}) for ks in row] + empty for row in keys.tolist()]


def replay(
    cache: ExpertCache,
    steps: list[list[list[int]]],
    key_bytes: dict[int, int] | list[int] | None = None,
    ahead: list[list[list[int]]] | None = None,
    starts: frozenset[int] = frozenset(),
) -> tuple[float, float]:
    """Drive `cache` through the steps, `tick(1)` after each position; after each step prefetch
    `ahead[t][l]` (never evicting the step's keys); `new_sequence()` before positions in
    `starts`. Returns (bytes of misses, bytes of prefetches) when `key_bytes` (key -> bytes) is
    given, else (0, 0): with one expert size, the cache's counters give the bytes."""
    access, tick, prefetch = cache.access, cache.tick, cache.prefetch
    missed_bytes = prefetched_bytes = 0
    for t, position in enumerate(steps):
        if t in starts:
            cache.new_sequence()
        preds = ahead[t] if ahead is not None else None
        for i, ks in enumerate(position):
            missed = access(ks)
            if missed and key_bytes is not None:
                missed_bytes += sum(key_bytes[k] for k, _ in missed)
            if preds is not None and preds[i]:
                got = prefetch(preds[i], ks)
                if got and key_bytes is not None:
                    prefetched_bytes += sum(key_bytes[k] for k, _ in got)
        tick(1)
    return float(missed_bytes), float(prefetched_bytes)


@dataclass
class _Setup:
    """What every (policy, budget) run of the Python path (router lookahead) shares."""

    trace: Trace
    steps: list[list[list[int]]]  # [position][layer] -> keys
    key_bytes: list[int]
    hotlist: list[int] | None
    ahead: list[list[list[int]]]  # lookahead prefetches, see lookahead_steps
    lookahead: int  # their distance
    starts: frozenset[int]  # positions where a new prompt begins


def _run_lookahead(setup: _Setup, policy: PolicySpec, n: int) -> tuple[int, float, dict]:
    """Replay through ExpertCache with the trace's router-lookahead prefetches: (hits, read,
    prefetch fields of SimResult). The compiled loops have no prefetch; this path keeps it."""
    cache = policy.cache(n, hotlist=setup.hotlist)
    preload = sum(setup.key_bytes[k] for k, _ in cache.preload())
    missed, prefetched = replay(cache, setup.steps, setup.key_bytes, setup.ahead, setup.starts)
    extra = {
        "preload_bytes": preload,
        "prefetch_bytes": prefetched,
        "prefetch_hits": cache.prefetch_hits,
        "prefetch_wasted": cache.prefetch_wasted,
    }
    return cache.hits, missed + prefetched, extra


def _row(r: ReplayResult, nbytes: int, acc: Access, **extra) -> SimResult:
    row = {k: v for k, v in asdict(r).items() if k != "passes"}
    row.update(extra, budget_bytes=nbytes, positions=int(acc.tick.sum()))
    return SimResult(**row)


def budget_sizes(trace: Trace, budgets: list[Budget], widest: int) -> list[tuple[int, int]]:
    """(slots, bytes) per budget; BudgetError below the widest step."""
    slot = trace.slot_bytes
    sizes = []
    for b in budgets:
        n = trace_slots(trace, b)
        if n < widest:
            raise BudgetError(
                f"budget {b} is {n} slots of {format_bytes(slot)}, below the widest step "
                f"({widest} experts): use at least {widest}slots ({widest * slot} bytes)"
            )
        sizes.append((n, b.nbytes if b.nbytes is not None else n * slot))
    return sizes


def trace_slots(trace: Trace, budget: Budget) -> int:
    """Slots `budget` holds in the trace's model: bytes become slots of the largest expert, a
    share counts the trace's L x E routed experts."""
    return budget.slots_of(trace.slot_bytes, trace.n_layers * trace.n_experts)


def parse_policies(policies: list[PolicySpec | str]) -> list[PolicySpec]:
    """The simulator's policies, parsed once: runtime policies with their options, the offline
    bounds, libCacheSim's `lcs:NAME` (its name checked here)."""
    specs = [PolicySpec.parse(p, offline=True) for p in policies]
    for spec in specs:
        if spec.name.startswith(LCS_PREFIX):
            from specdec.sim.lcs import lcs_policy

            lcs_policy(spec.name[len(LCS_PREFIX) :])  # raises naming the known ones
    return specs


def simulate(
    trace: Trace,
    policies: list[PolicySpec | str],
    budgets: list[Budget],
    hotlist: list[int] | None = None,
    positions: int | None = None,
    lookahead: int = 0,
    gammas: list[int] = (1,),
    alphas: list[float] = (1.0,),
    seed: int = 0,
) -> list[SimResult]:
    """Every (γ, α, policy, budget): γ outermost, then α, policies, budgets in the order given.
    γ > 1 replays verify passes (specdec.sim.replay); γ = 1 rows are the same for every α.
    lookahead d > 0 (γ = 1 only) prefetches the trace's layer l + d predictions after each step
    of layer l (static and the bounds ignore it: they read nothing ahead)."""
    policies = parse_policies(policies)
    if lookahead and any(p.options for p in policies):
        raise SpecdecError("--lookahead replays no verdicts: drop the +demote/+protect options")
    if lookahead and any(g != 1 for g in gammas):
        raise SpecdecError("--lookahead replays plain decoding only: use --gamma 1 with it")
    given = hotlist is not None
    if hotlist is None and any(p.name == "static" for p in policies):
        hotlist_static = hotlist_keys(trace, profile_hotlist(trace))
    else:
        hotlist_static = hotlist
    setup = None
    if lookahead:
        steps = trace_steps(trace, positions)
        E = trace.n_experts
        setup = _Setup(
            trace=trace,
            steps=steps,
            key_bytes=np.repeat(trace.expert_bytes, E).tolist(),  # key -> its expert's bytes
            hotlist=hotlist,
            ahead=lookahead_steps(trace, lookahead, positions),
            lookahead=lookahead,
            starts=frozenset(prompt_starts(trace, len(steps)).tolist()),
        )
    out: list[SimResult] = []
    runs = len(gammas) * len(alphas) * len(policies) * len(budgets)
    with progress(total=runs, desc="simulate", unit="replay") as bar:
        for gamma in gammas:
            plain: list[SimResult] = []
            for alpha in alphas:
                if gamma == 1 and plain:  # α changes nothing without drafts
                    out.extend(replace(r, alpha=alpha) for r in plain)
                    bar.update(len(plain))
                    continue
                acc = access_sequence(trace, gamma, alpha, seed, positions)
                sizes = budget_sizes(trace, budgets, acc.widest)
                rows = []
                for policy in policies:
                    hot = hotlist_static if policy.name == "static" else hotlist
                    for n, nbytes in sizes:
                        rows.append(
                            _one(setup, policy, n, nbytes, acc, trace, gamma, alpha, hot, given)
                        )
                        bar.update()
                if gamma == 1:
                    plain = rows
                out.extend(rows)
    return out


MAX_SLOTS = 1 << 20  # replay state for this many slots stays in the megabytes


def check_budgets(trace: Trace, budgets: list[Budget]) -> None:
    """Refuse a budget far above the trace's L x E experts (it holds every expert; the replays
    keep per-slot state, so 10^12 slots would exhaust memory) and say what holds them all.
    Up to MAX_SLOTS (or L x E, if larger) runs as given."""
    total = trace.n_layers * trace.n_experts
    for b in budgets:
        n = trace_slots(trace, b)
        if n > max(total, MAX_SLOTS):
            raise BudgetError(
                f"budget {b} is {n} slots, more than the trace's {total} experts "
                f"({trace.n_layers} layers x {trace.n_experts}): every expert fits in "
                f"{total}slots; give at most that"
            )


def _one(setup, policy: PolicySpec, n, nbytes, acc, trace, gamma, alpha, hot, given) -> SimResult:
    """One row: the compiled loops, the knapsack bound, or the Python lookahead path."""
    extra: dict = {}
    label = str(policy)
    if label == "static":
        extra["hotlist"] = "given" if given else "self"
    elif label == "hotness" and given:
        extra["hotlist"] = "given"
    if label == "knapsack_bound":
        keys, counts = np.unique(acc.keys, return_counts=True)  # [K'], [K']
        sizes = np.asarray(trace.expert_bytes, np.float64)[keys // trace.n_experts]  # [K']
        r = result(label, acc, n, gamma, alpha, *knapsack_counts(counts, sizes, nbytes))
    elif setup is not None and policy.runtime and label != "static":
        hits, read, more = _run_lookahead(setup, policy, n)
        r = result(label, acc, n, gamma, alpha, hits, read)
        extra.update(more, lookahead=setup.lookahead)
    else:
        hit, pre = policy_hits(policy, acc, n, hot)
        r = score(label, acc, n, trace, gamma, alpha, hit, pre)
    return _row(r, nbytes, acc, **extra)
