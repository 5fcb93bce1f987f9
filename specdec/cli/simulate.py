"""`specdec simulate TRACE`: replay a routing trace through cache policies and bounds.

    specdec simulate runs/trace-x --policy lru,slru,hotness,static,belady --budget 96slots,2GB,25%
    specdec simulate runs/trace-x --gamma 1,2,4,auto --alpha 1,0.9,0.8 --policy lru --json

What the rows mean, the policies and the bounds: specdec.sim.simulate (the library this
parses options for); `--gamma auto` rows: specdec.gamma.replay.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from specdec.cache.policies import policy_names
from specdec.cache.spec import OFFLINE
from specdec.clock.profiles import BUILTIN_NAMES, DEFAULT_PROFILE
from specdec.core.errors import SpecdecError
from specdec.core.seed import check_seed
from specdec.core.units import Budget, format_bytes
from specdec.gamma.spec import AUTO, Gamma
from specdec.sim.simulate import budget_sizes, check_budgets, parse_policies, simulate
from specdec.trace.format import hotlist_keys, load_trace, profile_hotlist, read_hotlist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace directory (see docs/trace-format.md)")
    parser.add_argument(
        "--policy",
        default="lru,slru,hotness,lfu,static,belady,opt_bypass,knapsack_bound",
        help=f"comma-separated, from: {','.join(policy_names() + OFFLINE)}, or lcs:NAME "
        "(libCacheSim: lcs:ARC, ...)",
    )
    parser.add_argument(
        "--budget",
        default="96slots",
        help="comma-separated cache budgets: 96slots, 512MiB, 2GB or N%% of the trace's experts",
    )
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
    parser.add_argument(
        "--gamma", default="1", help="positions per verify pass, e.g. 1,2,4,8 or auto"
    )
    parser.add_argument(
        "--config", help="auto: the model's config.json (or minimax-m2.5) for modeled time"
    )
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"auto: device profile, one of {', '.join(BUILTIN_NAMES)} or a .yaml/.json file",
    )
    parser.add_argument("--alpha", default="1", help="draft acceptance, e.g. 1,0.9,0.8")
    parser.add_argument("--seed", type=int, default=0, help="seed of the acceptance process")
    parser.add_argument("--json", action="store_true", help="print a JSON list of results")


def run(args: argparse.Namespace) -> int:
    check_seed(args.seed)
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
    policies = parse_policies([p.strip() for p in args.policy.split(",") if p.strip()])
    budgets = parse_budgets(args.budget)
    for flag, given in (("--policy", policies), ("--budget", budgets)):
        if not given:  # `--budget ''` printed an empty table and exited 0
            raise SpecdecError(f"{flag} {getattr(args, flag[2:])!r}: give at least one")
    check_budgets(trace, budgets)
    given = [Gamma.parse(g) for g in args.gamma.split(",") if g.strip()]
    auto = AUTO in given
    gammas = [g.fixed for g in given if not g.auto]
    alphas = _numbers(args.alpha, float, "--alpha")
    if not given or not alphas:
        flag, text = ("--gamma", args.gamma) if not given else ("--alpha", args.alpha)
        raise SpecdecError(f"{flag} {text!r}: give at least one")
    if not auto:  # they price auto's passes and nothing else: given without it, said so
        ignored = ["--config"] if args.config else []
        ignored += ["--profile"] if args.profile != DEFAULT_PROFILE else []
        if ignored:
            one = len(ignored) == 1
            raise SpecdecError(
                f"{' and '.join(ignored)} price{'s' if one else ''} --gamma auto's passes only, "
                f"and no auto is asked: add auto to --gamma or drop {'it' if one else 'them'}"
            )
    if auto:
        from specdec.gamma.replay import auto_rows, auto_setup

        clock_setup = auto_setup(trace, policies, args.lookahead, args.config, args.profile)
    results = (
        simulate(
            trace,
            policies,
            budgets,
            hotlist,
            args.positions,
            args.lookahead,
            gammas,
            alphas,
            args.seed,
        )
        if gammas
        else []
    )
    if auto:
        sizes = budget_sizes(trace, budgets, trace.top_k)
        results += auto_rows(
            trace, policies, sizes, hotlist, alphas, args.seed, args.positions, *clock_setup
        )
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
        return 0
    print(
        f"{trace.model or args.trace}: {results[0].positions if results else 0} positions, "
        f"{trace.n_layers} layers x top-{trace.top_k} of {trace.n_experts}, "
        f"slot {format_bytes(trace.slot_bytes)}"
    )
    print(
        f"{'policy':<15}{'gamma':>6}{'alpha':>6}{'slots':>7}{'budget':>10}{'union':>7}"
        f"{'hit rate':>10}{'misses':>12}{'read/token':>12}"
    )
    for r in results:
        print(
            f"{r.policy:<15}{r.gamma!s:>6}{r.alpha:>6.2f}{r.budget_slots:>7}"
            f"{format_bytes(r.budget_bytes):>10}{r.mean_union:>7.2f}{r.hit_rate:>10.4f}"
            f"{r.misses:>12.0f}{format_bytes(r.bytes_per_token):>12}"
        )
    return 0


def parse_budgets(text: str) -> list[Budget]:
    """`--budget 96slots,2GB,25%` -> one Budget each, read once here."""
    return [Budget.parse(b.strip()) for b in text.split(",") if b.strip()]


def _numbers(text: str, kind, flag: str) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecdecError(f"{flag} {text}: give comma-separated numbers, e.g. 1,2,4") from None
