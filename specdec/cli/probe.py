"""`specdec probe NAME`: the question's measurements as commands, each writing .md/.json/.png.

    specdec probe eviction  --model tiny --out runs/probes   # records heldout + profile traces
    specdec probe eviction  --trace T_EVAL --profile-trace T_PROFILE --out runs/probes
    specdec probe lookahead --model tiny --out runs/probes   # or --trace T (with lookahead.npy)
    specdec probe gates     --model tiny --out runs/probes --budgets 10%,25%,50%
    specdec probe basis     --model tiny --out runs/probes
    specdec probe read_path --read-json benchmarks/results/read.json --out runs/probes
    specdec probe all       --model tiny --out runs/probes

The probes and their order come from the registry of specdec/probes/ (registry.py); the flags
are ProbeOptions' fields, plus the fields a probe's own Options adds. Python (what the
experiment configs call): `specdec.probes.run_probe("eviction", ProbeOptions(...))`.
"""

from __future__ import annotations

import argparse
import dataclasses

from specdec.cli import output_path
from specdec.probes import PROBES, ProbeOptions, make_options, parse_budgets, probe_names
from specdec.probes.registry import BASE_FIELDS, DEFAULT_BUDGETS, run_probe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ProbeOptions()
    parser.add_argument("name", choices=[*probe_names(), "all"], help="the probe to run")
    parser.add_argument("--model", default=d.model, help="bundled name, mlx-lm or packed dir")
    parser.add_argument(
        "--out", type=output_path, default=d.out, help="directory for <name>.md/.json/.png"
    )
    parser.add_argument("--trace", help="use this recorded trace instead of recording one")
    parser.add_argument("--profile-trace", help="eviction: the trace the hotlist comes from")
    parser.add_argument("--prompts", default=d.prompts, help="heldout|profile|FILE|dataset:NAME")
    parser.add_argument(
        "--profile-prompts", default=d.profile_prompts, help="eviction: prompts of the hotlist"
    )
    parser.add_argument("--limit", type=int, help="use only the first N prompts of each set")
    parser.add_argument("--max-tokens", type=int, default=d.max_tokens, help="decoded per prompt")
    parser.add_argument(
        "--budgets",
        default=",".join(DEFAULT_BUDGETS),
        help="comma-separated: 10%% of all experts, 512MiB, 96slots",
    )
    parser.add_argument(
        "--positions",
        choices=["decode", "prefill", "all"],
        default=d.positions,
        help="eviction: replay decode positions, prompt positions (teacher-forced), or both",
    )
    parser.add_argument("--policy", default=d.policy, help="gates: residency policy")
    parser.add_argument(
        "--read-json", default=d.read_json, help="read_path: `specdec bench read --json` output"
    )
    added = set(BASE_FIELDS)
    for name in probe_names():  # the knobs a probe's own Options adds
        for f in dataclasses.fields(PROBES[name].Options):
            if f.name not in added:
                added.add(f.name)
                parser.add_argument(
                    f"--{f.name.replace('_', '-')}",
                    dest=f.name,
                    type={"int": int, "float": float, int: int, float: float}.get(f.type, str),
                    default=argparse.SUPPRESS,
                    help=f"{name}: {f.metadata.get('help', f.name)}",
                )


def run(args: argparse.Namespace) -> int:
    budgets = parse_budgets(
        [b.strip() for b in args.budgets.split(",") if b.strip()], f"--budgets {args.budgets}"
    )
    given = {k: v for k, v in vars(args).items() if k != "name"} | {"budgets": budgets}
    names = [args.name] if args.name != "all" else list(probe_names())
    runs = []
    for name in names:
        fields = {f.name for f in dataclasses.fields(PROBES[name].Options)}
        opts = make_options(name, {k: v for k, v in given.items() if k in fields})
        reason = PROBES[name].skip(opts) if args.name == "all" else None
        if reason:
            print(f"probe all: {reason}")
        else:
            runs.append((name, opts))
    for name, opts in runs:
        print(run_probe(name, opts).files["md"].read_text())
    return 0
