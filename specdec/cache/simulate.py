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
widest step as scratch. `hotness` is seeded and preloaded only from an explicit hotlist.
bytes_read counts the misses only; preloads of a hotlist are reported as preload_bytes.
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
    bytes_read: float  # bytes of the misses
    bytes_per_token: float  # bytes_read per position
    preload_bytes: int  # hotlist preloads, read before the first position
    positions: int


def trace_steps(trace: Trace, positions: int | None = None) -> list[list[list[int]]]:
    """[position][layer] -> sorted distinct keys: the steps of each one-position forward call."""
    keys = np.sort(trace.keys()[:positions], axis=-1)  # [T, L, k]
    if keys.shape[2] > 1 and (keys[..., 1:] == keys[..., :-1]).any():
        raise SpecdecError(
            "trace routes one expert twice at one position and layer: fix its writer"
        )
    return keys.tolist()


def replay(
    cache: ExpertCache, steps: list[list[list[int]]], key_bytes: dict[int, int] | None = None
) -> float:
    """Drive `cache` through the steps, `tick(1)` after each position. Returns the bytes of the
    misses when `key_bytes` (key -> expert bytes) is given, else 0."""
    access, tick = cache.access, cache.tick
    total = 0
    for position in steps:
        for ks in position:
            _, missed = access(ks)
            if missed and key_bytes is not None:
                total += sum(key_bytes[k] for k, _ in missed)
        tick(1)
    return float(total)


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


def _run(setup: _Setup, policy: str, n: int, nbytes: int, lru_hits) -> SimResult:
    trace, flat = setup.trace, setup.flat
    accesses = sum(len(ks) for ks in flat)
    n_pos, slot = len(setup.steps), trace.slot_bytes
    preload = 0
    if policy == "knapsack_bound":
        hits, missed_bytes = knapsack_bound(flat, nbytes, setup.key_bytes)
    elif policy == "lru":
        hits_by_layer = lru_hits[n]  # [L]
        acc_by_layer = np.bincount(
            [k // trace.n_experts for ks in flat for k in ks], minlength=trace.n_layers
        )  # [L]
        hits = int(hits_by_layer.sum())
        missed_bytes = float(((acc_by_layer - hits_by_layer) * trace.expert_bytes).sum())
    else:
        hot = setup.hotlist
        if policy == "belady":
            pol = Belady(n, flat)
        else:
            pol = make_policy(policy, n, hotlist=hot, scratch=setup.widest)
        cache = ExpertCache(n, pol)
        preload = sum(setup.key_bytes.get(k, slot) for k, _ in cache.preload())
        missed_bytes = replay(cache, setup.steps, None if setup.uniform else setup.key_bytes)
        hits = cache.hits
        if setup.uniform:
            missed_bytes = float(cache.misses * slot)
    return SimResult(
        policy=policy,
        budget_slots=n,
        budget_bytes=nbytes,
        accesses=accesses,
        hits=hits,
        misses=accesses - hits,
        hit_rate=hits / accesses if accesses else 0.0,
        bytes_read=missed_bytes,
        bytes_per_token=missed_bytes / max(n_pos, 1),
        preload_bytes=preload,
        positions=n_pos,
    )


def simulate(
    trace: Trace,
    policies: list[str],
    budgets: list[str],
    hotlist: list[int] | None = None,
    positions: int | None = None,
) -> list[SimResult]:
    """Every (policy, budget) pair: policies outer, budgets in the order given."""
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
    if "lru" in policies:
        curve = lru_curve_steps(flat, [n for n, _ in sizes], group_size=E)  # [B, G]
        for (n, _), h in zip(sizes, curve, strict=True):
            lru_hits[n] = np.pad(h, (0, trace.n_layers - len(h)))  # [L]
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
        )
        out.extend(_run(setup, policy, n, nbytes, lru_hits) for n, nbytes in sizes)
    return out


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
    parser.add_argument("--json", action="store_true", help="print a JSON list of results")


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    hotlist = None
    if args.hotlist:
        hotlist = hotlist_keys(trace, read_hotlist(args.hotlist))
    elif args.hotlist_trace:
        hotlist = hotlist_keys(trace, profile_hotlist(load_trace(args.hotlist_trace)))
    if args.positions is not None and args.positions < 1:
        raise SpecdecError(f"--positions {args.positions}: give a positive number of positions")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    budgets = [b.strip() for b in args.budget.split(",") if b.strip()]
    results = simulate(trace, policies, budgets, hotlist, args.positions)
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
