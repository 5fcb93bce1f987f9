"""`specdec trace synth|stats|fit`: calibrated synthetic traces and routing statistics.

    specdec trace synth /tmp/minimax --like minimax-m2.5 --positions 2000 --seed 0
    specdec trace synth /tmp/other --targets t.json --positions 2000     # fits first
    specdec trace stats /tmp/minimax --like minimax-m2.5                 # beside the targets
    specdec trace stats runs/trace-heldout --budget 16slots --json > t.json   # any trace
    specdec trace fit --targets t.json                                   # fit to it
    specdec trace fit --like minimax-m2.5                                # refit a preset

Generator: specdec.trace.synthetic; statistics: specdec.sim.stats; fit: specdec.sim.fit;
presets and targets files: specdec.trace.presets. docs/trace-synth.md has the model and the fit.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from specdec.cli import output_path
from specdec.core.errors import SpecdecError
from specdec.core.machine import physical_memory
from specdec.core.seed import check_seed
from specdec.sim.fit import TOLERANCE, fit
from specdec.sim.stats import PHASES, routing_stats, trace_stats
from specdec.trace.format import load_trace, save_trace
from specdec.trace.presets import get_preset, load_targets
from specdec.trace.synthetic import Targets, generate

ACTIONS = ("synth", "stats", "fit")


def add_parsers(sub) -> None:
    """Add the synth, stats and fit subcommands to `specdec trace`'s subparsers."""
    syn = sub.add_parser("synth", help="write a synthetic trace calibrated to a model's statistics")
    syn.add_argument("out", type=output_path, help="trace directory to write")
    _model_args(syn)
    syn.add_argument("--positions", type=int, required=True, help="positions to generate")
    syn.add_argument("--seed", type=int, default=0, help="generator seed")
    syn.add_argument("--overwrite", action="store_true", help="replace an existing trace")
    st = sub.add_parser("stats", help="overlap, unions, LRU and static bound of a trace")
    st.add_argument("trace", help="trace directory")
    st.add_argument("--budget", help="cache budget for LRU and the static bound (9GB, 1130slots)")
    st.add_argument("--like", help="print this preset's targets beside (and use its budget)")
    st.add_argument("--phase", default="all", choices=list(PHASES), help="positions to measure")
    st.add_argument("--json", action="store_true", help="print the statistics as JSON")
    fi = sub.add_parser("fit", help="fit the generator's parameters to measured statistics")
    _model_args(fi)
    fi.add_argument("--seed", type=int, default=0, help="generator seed")
    fi.add_argument("--json", action="store_true", help="print the fitted parameters as JSON")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--like", help="model preset (minimax-m2.5, deepseek-v3, ...)")
    p.add_argument("--targets", help="JSON file of measured statistics (docs/trace-synth.md)")


def _model(args: argparse.Namespace):
    """(shape, targets or None, stored params or None, label) from --like / --targets."""
    if args.like is None and args.targets is None:
        raise SpecdecError("give --like PRESET or --targets FILE (or both)")
    if args.targets is not None:
        shape, targets = load_targets(args.targets, args.like)
        return shape, targets, None, Path(args.targets).name
    preset = get_preset(args.like)
    return preset.shape, preset.targets, preset.params, args.like


def run(args: argparse.Namespace) -> int:
    if args.action != "stats":
        check_seed(args.seed)
    return {"synth": _synth, "stats": _stats, "fit": _fit}[args.action](args)


def _synth(args: argparse.Namespace) -> int:
    if args.positions < 1:
        raise SpecdecError(f"--positions {args.positions}: give at least 1")
    if args.out.exists() and not args.overwrite:
        raise SpecdecError(f"{args.out} exists: choose another directory or pass --overwrite")
    shape, targets, params, label = _model(args)
    # the trace [T, L, k] int32 and the stats' working copies must fit before anything is drawn
    need = 3 * 4 * args.positions * shape.n_layers * shape.top_k
    memory = physical_memory()
    if memory and need > memory:
        raise SpecdecError(
            f"--positions {args.positions}: the trace needs about {need / 1e9:.1f} GB and this "
            f"machine has {memory / 1e9:.1f} GB: give fewer positions"
        )
    if params is None:
        result = fit(targets, shape, seed=args.seed)
        params = result.params
        print(f"fitted to {label}: {params}")
    trace = generate(shape, params, args.positions, args.seed, model=f"synthetic:{label}")
    save_trace(trace, args.out, overwrite=args.overwrite)
    stats = routing_stats(trace, gammas=(2, 3, 8))
    union = " / ".join("-" if v is None else f"{v:.2f}" for v in stats["union"].values())
    overlap = "-" if stats["overlap"] is None else f"{stats['overlap']:.3f}"
    print(
        f"{args.out}: {args.positions} positions, {shape.n_layers} layers x top-{shape.top_k} of "
        f"{shape.n_experts}, expert {shape.expert_bytes} B; overlap {overlap}, "
        f"U(2/3/8) {union}  (`specdec trace stats {args.out}` for all)"
    )
    return 0


def _stats(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    preset = get_preset(args.like) if args.like else None
    budget = args.budget or (preset.budget if preset else None)
    s = trace_stats(trace, budget, phase=args.phase)
    shape = s["shape"]
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(
        f"{args.trace}: {s['positions']} positions ({args.phase}), {shape['n_layers']} layers x "
        f"top-{shape['top_k']} of {shape['n_experts']}"
        + (f", budget {budget} = {s['budget_slots']} slots" if budget else "")
    )
    print_table(s, preset.targets if preset else None)
    ov = [x for x in s["overlap_per_layer"] if x is not None]
    if ov:
        print(f"overlap per layer: min {min(ov):.3f}, max {max(ov):.3f}")
    print(
        f"skew: busiest tenth of experts {s['top10_share']:.3f} of accesses, entropy {s['entropy']:.3f}"
    )
    return 0


def _fit(args: argparse.Namespace) -> int:
    shape, targets, _, label = _model(args)
    if targets is None:
        raise SpecdecError(
            f"preset {args.like} is shape only (no measured statistics): pass --targets FILE"
        )
    result = fit(targets, shape, seed=args.seed)
    p = result.params
    if args.json:
        out = {
            "targets": label,
            "params": asdict(p),
            "evaluations": result.evaluations,
            "proxy": result.proxy,
            "replayed": result.replayed,
        }
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(f"{label}: {result.evaluations} evaluations, seed {args.seed}")
    print(
        f"SynthParams(skew={p.skew:.4f}, reuse={p.reuse:.4f}, history={p.history:.4f}, "
        f"window={p.window:.3f})"
    )
    print(f"replayed: one {targets.positions}-position trace of the full shape")
    print_table(result.replayed, targets)
    return 0


def print_table(stats: dict, targets: Targets | None) -> None:
    """statistic, value, and where targets are given: target, tolerance, within."""
    rows = [("overlap", stats["overlap"], targets and targets.overlap, TOLERANCE["overlap"])]
    for g, v in stats["union"].items():
        want = targets.union.get(int(g)) if targets else None
        rows.append((f"U({g})", v, want, want and TOLERANCE["union"] * want))
    for name in ("lru", "static"):
        if name in stats:
            rows.append((name, stats[name], targets and getattr(targets, name), TOLERANCE[name]))
    print(f"{'statistic':<10}{'value':>9}{'target':>9}{'tol':>8}  within")
    for name, v, want, tol in rows:
        if v is None:
            print(f"{name:<10}{'-':>9}  (too few consecutive positions)")
        elif want is None:
            print(f"{name:<10}{v:>9.3f}")
        else:
            ok = "yes" if abs(v - want) <= tol else "NO"
            print(f"{name:<10}{v:>9.3f}{want:>9.3f}{tol:>8.3f}  {ok}")
