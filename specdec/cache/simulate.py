"""`specdec simulate`: replay a routing trace through the runtime's cache policies and bounds.

    specdec simulate runs/trace-x --policy lru,slru,hotness,lfu,static,belady,knapsack_bound \
        --budget 96slots,2GB --json
    specdec simulate runs/trace-x --policy hotness,static --budget 1GB --hotlist hot.txt

Each position of the trace is one forward call of one position; its steps are the MoE layers in
order (keys layer * n_experts + expert), then `tick(1)`: the same ExpertCache and policy classes
the runtime uses. Byte budgets become slots of the largest expert of any layer. `lru` comes from
the one-pass curve (specdec.cache.bounds), equal to a replay per budget; `belady` and
`knapsack_bound` are the offline bounds. `static` pins the hotlist given (--hotlist or
--hotlist-trace), else the trace's own profile (hindsight, like knapsack_bound), and keeps the
widest step as scratch. `hotness` is seeded and preloaded only from an explicit hotlist, and
starts over (new_sequence) where prompt_ids.npy changes prompt. --lookahead D prefetches the
trace's router predictions (lookahead.npy) for layer l + D after the step of layer l, as the
runtime does. bytes_read counts misses and prefetches; hotlist preloads are preload_bytes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np

from specdec.cache.bounds import Belady, knapsack_bound, lru_curve_steps
from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import POLICIES, make_policy
from specdec.errors import BudgetError, SpecdecError
from specdec.trace.format import Trace, hotlist_keys, load_trace, profile_hotlist, read_hotlist
from specdec.units import format_bytes, parse_budget

ALL = POLICIES + ("belady", "knapsack_bound")


@dataclass
class SimResult:
    """One (policy, budget) row of `specdec simulate --json`."""

    policy: str
    budget_slots: int
    budget_bytes: int
    accesses: int
    hits: float  # an int except for knapsack_bound, whose last expert is pinned fractionally
    misses: float
    hit_rate: float
    bytes_read: float  # bytes read during the replay: misses, plus prefetches with lookahead
    bytes_per_token: float  # bytes_read per position
    preload_bytes: int  # hotlist preloads, read before the first position
    positions: int
    lookahead: int = 0  # router lookahead distance replayed (0: none)
    prefetch_bytes: float = 0.0  # part of bytes_read
    prefetch_hits: int = 0  # prefetched experts a later step used (counted as hits)
    prefetch_wasted: int = 0  # prefetched experts evicted unused
    hotlist: str = (
        ""  # "given" (--hotlist/--hotlist-trace) or "self" (static: this trace's profile)
    )


def trace_steps(trace: Trace, positions: int | None = None) -> list[list[list[int]]]:
    """[position][layer] -> sorted distinct keys: the steps of each one-position forward call."""
    keys = np.sort(trace.keys()[:positions], axis=-1)  # [T, L, k]
    if keys.shape[2] > 1 and (keys[..., 1:] == keys[..., :-1]).any():
        raise SpecdecError(
            "trace routes one expert twice at one position and layer: fix its writer"
        )
    return keys.tolist()


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
    key_bytes: dict[int, int] | None = None,
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


def lru_curve(trace: Trace, budgets: list[int], positions: int | None = None) -> np.ndarray:
    """LRU hits of the trace at every budget (slots), from one pass; [len(budgets)]."""
    flat = [ks for position in trace_steps(trace, positions) for ks in position]
    return lru_curve_steps(flat, budgets)


@dataclass
class _Setup:
    """What every (policy, budget) run of one trace shares."""

    trace: Trace
    steps: list[list[list[int]]]  # [position][layer] -> keys
    flat: list[list[int]]  # one list of keys per step
    key_bytes: dict[int, int]
    uniform: bool  # every layer's experts have the same size
    widest: int
    hotlist: list[int] | None
    hotlist_source: str  # SimResult.hotlist
    ahead: list[list[list[int]]] | None  # lookahead prefetches, see lookahead_steps
    lookahead: int
    starts: frozenset[int]  # positions where a new prompt begins


def _run(setup: _Setup, policy: str, n: int, nbytes: int, lru_hits) -> SimResult:
    trace, flat = setup.trace, setup.flat
    accesses = sum(len(ks) for ks in flat)
    n_pos, slot = len(setup.steps), trace.slot_bytes
    extra = {}
    if policy == "knapsack_bound":
        hits, read = knapsack_bound(flat, nbytes, setup.key_bytes)
    elif policy == "lru" and setup.ahead is None:
        hits_by_layer = lru_hits[n]  # [L]
        acc_by_layer = np.bincount(
            [k // trace.n_experts for ks in flat for k in ks], minlength=trace.n_layers
        )  # [L]
        hits = int(hits_by_layer.sum())
        read = float(((acc_by_layer - hits_by_layer) * trace.expert_bytes).sum())
    else:
        if policy == "belady":
            pol = Belady(n, flat)
        else:
            pol = make_policy(policy, n, hotlist=setup.hotlist, scratch=setup.widest)
        cache = ExpertCache(n, pol)
        preload = sum(setup.key_bytes.get(k, slot) for k, _ in cache.preload())
        by_key = None if setup.uniform else setup.key_bytes
        missed, prefetched = replay(cache, setup.steps, by_key, setup.ahead, setup.starts)
        if setup.uniform:
            missed, prefetched = cache.misses * slot, cache.prefetch_reads * slot
        hits, read = cache.hits, float(missed + prefetched)
        extra = {
            "preload_bytes": preload,
            "prefetch_bytes": float(prefetched),
            "prefetch_hits": cache.prefetch_hits,
            "prefetch_wasted": cache.prefetch_wasted,
        }
    return SimResult(
        policy=policy,
        budget_slots=n,
        budget_bytes=nbytes,
        accesses=accesses,
        hits=hits,
        misses=accesses - hits,
        hit_rate=hits / accesses if accesses else 0.0,
        bytes_read=read,
        bytes_per_token=read / max(n_pos, 1),
        preload_bytes=extra.pop("preload_bytes", 0),
        positions=n_pos,
        lookahead=setup.lookahead,
        hotlist=setup.hotlist_source if policy in ("static", "hotness") else "",
        **extra,
    )


def simulate(
    trace: Trace,
    policies: list[str],
    budgets: list[str],
    hotlist: list[int] | None = None,
    positions: int | None = None,
    lookahead: int = 0,
) -> list[SimResult]:
    """Every (policy, budget) pair: policies outer, budgets in the order given. lookahead d > 0
    prefetches the trace's layer l + d predictions after each step of layer l (static and the
    bounds ignore it: they read nothing ahead)."""
    unknown = [p for p in policies if p not in ALL]
    if unknown:
        raise SpecdecError(f"unknown policy {unknown[0]!r}: use one of {', '.join(ALL)}")
    steps = trace_steps(trace, positions)
    flat = [ks for position in steps for ks in position]
    widest = max((len(ks) for ks in flat), default=1)
    slot = trace.slot_bytes
    sizes: list[tuple[int, int]] = []
    for text in budgets:
        b = parse_budget(text)
        n = b.to_slots(slot)
        if n < widest:
            raise BudgetError(
                f"budget {text} is {n} slots of {format_bytes(slot)}, below the widest step "
                f"({widest} experts): use at least {widest}slots ({widest * slot} bytes)"
            )
        sizes.append((n, b.nbytes if b.nbytes is not None else n * slot))
    E = trace.n_experts
    key_bytes = {k: trace.expert_bytes[k // E] for k in {k for ks in flat for k in ks}}
    if hotlist is None and "static" in policies:
        hotlist_static = hotlist_keys(trace, profile_hotlist(trace))
    else:
        hotlist_static = hotlist
    lru_hits = {}
    if "lru" in policies and not lookahead:  # with prefetches, LRU is replayed instead
        curve = lru_curve_steps(flat, [n for n, _ in sizes], group_size=E)  # [B, G]
        for (n, _), h in zip(sizes, curve, strict=True):
            lru_hits[n] = np.pad(h, (0, trace.n_layers - len(h)))  # [L]
    ahead = lookahead_steps(trace, lookahead, positions) if lookahead else None
    starts = frozenset()
    if trace.prompt_ids is not None:
        pid = trace.prompt_ids[: len(steps)]
        starts = frozenset((np.flatnonzero(pid[1:] != pid[:-1]) + 1).tolist())
    out = []
    for policy in policies:
        setup = _Setup(
            trace=trace,
            steps=steps,
            flat=flat,
            key_bytes=key_bytes,
            uniform=len(set(trace.expert_bytes)) == 1,
            widest=widest,
            hotlist=hotlist_static if policy == "static" else hotlist,
            hotlist_source="given" if hotlist is not None else "self" if policy == "static" else "",
            ahead=ahead if policy in POLICIES and policy != "static" else None,
            lookahead=lookahead if policy in POLICIES and policy != "static" else 0,
            starts=starts,
        )
        out.extend(_run(setup, policy, n, nbytes, lru_hits) for n, nbytes in sizes)
    return out


MAX_SLOTS = 1 << 20  # replay state for this many slots stays in the megabytes


def check_budgets(trace: Trace, budgets: list[str]) -> None:
    """Refuse a budget far above the trace's L x E experts (it holds every expert; the replays
    keep per-slot state, so 10^12 slots would exhaust memory) and say what holds them all.
    Up to MAX_SLOTS (or L x E, if larger) runs as given."""
    total = trace.n_layers * trace.n_experts
    for text in budgets:
        n = parse_budget(text).to_slots(trace.slot_bytes)
        if n > max(total, MAX_SLOTS):
            raise BudgetError(
                f"budget {text} is {n} slots, more than the trace's {total} experts "
                f"({trace.n_layers} layers x {trace.n_experts}): every expert fits in "
                f"{total}slots; give at most that"
            )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace directory (see docs/trace-format.md)")
    parser.add_argument(
        "--policy",
        default="lru,slru,hotness,lfu,static,belady,knapsack_bound",
        help=f"comma-separated, from: {','.join(ALL)}",
    )
    parser.add_argument("--budget", default="96slots", help="comma-separated: 96slots,2GB,512MiB")
    hot = parser.add_mutually_exclusive_group()
    hot.add_argument("--hotlist", help="ds4 hotlist file seeding hotness and pinned by static")
    hot.add_argument("--hotlist-trace", help="profile this other trace into the hotlist")
    parser.add_argument("--positions", type=int, help="replay only the first N positions")
    parser.add_argument(
        "--lookahead",
        type=int,
        default=0,
        help="prefetch the trace's router predictions D MoE layers ahead (needs lookahead.npy)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of results")


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    hotlist = None
    if args.hotlist:
        hotlist = hotlist_keys(trace, read_hotlist(args.hotlist))
    elif args.hotlist_trace:
        hotlist = hotlist_keys(trace, profile_hotlist(load_trace(args.hotlist_trace)))
    if args.lookahead < 0:
        raise SpecdecError(f"--lookahead {args.lookahead}: give a distance >= 1, or 0 for none")
    if args.positions is not None and args.positions < 1:
        raise SpecdecError(f"--positions {args.positions}: give a positive number of positions")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    budgets = [b.strip() for b in args.budget.split(",") if b.strip()]
    check_budgets(trace, budgets)
    results = simulate(trace, policies, budgets, hotlist, args.positions, args.lookahead)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
        return 0
    print(
        f"{trace.model or args.trace}: {results[0].positions if results else 0} positions, "
        f"{trace.n_layers} layers x top-{trace.top_k} of {trace.n_experts}, "
        f"slot {format_bytes(trace.slot_bytes)}"
    )
    head = (
        f"{'policy':<15}{'slots':>7}{'budget':>10}{'hit rate':>10}{'misses':>12}{'read/token':>12}"
    )
    print(head)
    for r in results:
        print(
            f"{r.policy:<15}{r.budget_slots:>7}{format_bytes(r.budget_bytes):>10}"
            f"{r.hit_rate:>10.4f}{r.misses:>12.0f}{format_bytes(r.bytes_per_token):>12}"
        )
    return 0
