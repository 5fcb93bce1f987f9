"""`specdec probe NAME`: the question's measurements as commands, each writing .md/.json/.png.

    specdec probe eviction  --model tiny --out runs/probes   # records heldout + profile traces
    specdec probe eviction  --trace T_EVAL --profile-trace T_PROFILE --out runs/probes
    specdec probe lookahead --model tiny --out runs/probes   # or --trace T (with lookahead.npy)
    specdec probe gates     --model tiny --out runs/probes --budgets 10,25,50
    specdec probe basis     --model tiny --out runs/probes
    specdec probe read_path --read-json benchmarks/results/read.json --out runs/probes
    specdec probe all       --model tiny --out runs/probes

Python (what the experiment configs call): `run_probe("eviction", ProbeOptions(model="tiny",
out="runs/probes"))` returns the rows and writes `<out>/<name>.{md,json,png}`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from specdec.core.errors import SpecdecError

NAMES = ("gates", "eviction", "lookahead", "basis", "read_path")  # gates first: its recording
# keeps the MoE inputs, and `probe all` reuses it for the others


@dataclass
class ProbeOptions:
    """Everything a probe may need; each probe reads only its own fields."""

    model: str = "tiny"
    out: str = "runs/probes"
    trace: str | None = None  # evaluated trace; recorded from `prompts` when None
    profile_trace: str | None = None  # hotlist source (eviction); recorded from `profile_prompts`
    prompts: str = "heldout"
    profile_prompts: str = "profile"
    limit: int | None = None  # prompts per set
    max_tokens: int = 32
    budgets: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.3, 0.5, 0.75])
    positions: str = "decode"
    policy: str = "lru"  # residency policy (gates) and cache of the prefetch replay (lookahead)
    read_json: str = "benchmarks/results/read.json"


_LOADED: dict[str, object] = {}  # model -> StreamedModel, loaded once per process
_RECORDED: dict[tuple, object] = {}  # (model, prompts, max_tokens, limit) -> Recording


def _recording(opts: ProbeOptions, prompts: str, keep_inputs: bool = False):
    """Record `prompts` on opts.model once per process (`probe all` shares it across probes);
    a recording with MoE inputs also serves requests without them."""
    from specdec.probes.record import record
    from specdec.stream.loader import load

    key = (opts.model, prompts, opts.max_tokens, opts.limit)
    rec = _RECORDED.get(key)
    if rec is None or (keep_inputs and rec.inputs is None):
        if opts.model not in _LOADED:
            _LOADED[opts.model] = load(opts.model, budget="100%", with_mtp=False)
        sm = _LOADED[opts.model]
        rec = record(
            opts.model, prompts, opts.max_tokens, limit=opts.limit, keep_inputs=keep_inputs, sm=sm
        )
        _RECORDED[key] = rec
    return rec


def _trace(opts: ProbeOptions, path: str | None, prompts: str):
    from specdec.trace.format import load_trace

    return load_trace(path) if path else _recording(opts, prompts).trace


def run_probe(name: str, opts: ProbeOptions) -> list[dict]:
    """Run one probe, write its files under opts.out, return its rows."""
    where = opts.trace or f"{opts.model}, prompts {opts.prompts}"
    if name == "eviction":
        from specdec.probes.eviction import eviction_table, write_eviction

        ev = _trace(opts, opts.trace, opts.prompts)
        prof = _trace(opts, opts.profile_trace, opts.profile_prompts)
        rows = eviction_table(ev, prof, opts.budgets, opts.positions)
        src = opts.profile_trace or f"prompts {opts.profile_prompts}"
        write_eviction(rows, opts.out, f"Eviction key on {where}; hotlist profiled on {src}.")
    elif name == "lookahead":
        from specdec.probes.lookahead import lookahead_table, write_lookahead

        rows = lookahead_table(_trace(opts, opts.trace, opts.prompts), opts.budgets, opts.policy)
        write_lookahead(rows, opts.out, f"Router lookahead recall on {where}.")
    elif name == "gates":
        from specdec.probes.gates import gates_table, write_gates
        from specdec.probes.record import record
        from specdec.stream.loader import load

        if opts.trace:
            raise SpecdecError("probe gates needs the MoE inputs, not a trace: drop --trace")
        sm = load(opts.model, budget="100%", with_mtp=False)
        rec = record(
            opts.model, opts.prompts, opts.max_tokens, limit=opts.limit, keep_inputs=True, sm=sm
        )
        rows = gates_table(sm, rec, opts.budgets, opts.policy)
        write_gates(rows, opts.out, f"Gates on {where}.")
    elif name == "basis":
        from specdec.probes.basis import basis_table, write_basis

        rows = basis_table(opts.model)
        write_basis(rows, opts.out, f"Shared basis of {opts.model}'s experts.")
    elif name == "read_path":
        from specdec.probes.read_path import load_read_json, read_path_table, write_read_path

        rows = read_path_table(load_read_json(opts.read_json))
        write_read_path(rows, opts.out, f"Read paths ({opts.read_json}).")
    else:
        raise SpecdecError(f"unknown probe {name!r}: use one of {', '.join(NAMES)} or all")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ProbeOptions()
    parser.add_argument("name", choices=[*NAMES, "all"])
    parser.add_argument("--model", default=d.model, help="bundled name, mlx-lm or packed dir")
    parser.add_argument("--out", default=d.out, help="directory for <name>.md/.json/.png")
    parser.add_argument("--trace", help="use this recorded trace instead of recording one")
    parser.add_argument("--profile-trace", help="eviction: the trace the hotlist comes from")
    parser.add_argument("--prompts", default=d.prompts, help="heldout|profile|FILE|dataset:NAME")
    parser.add_argument("--profile-prompts", default=d.profile_prompts)
    parser.add_argument("--limit", type=int, help="use only the first N prompts of each set")
    parser.add_argument("--max-tokens", type=int, default=d.max_tokens, help="decoded per prompt")
    parser.add_argument(
        "--budgets",
        default="5,10,20,30,50,75",
        help="percent of all routed experts, comma-separated",
    )
    parser.add_argument(
        "--positions",
        choices=["decode", "prefill", "all"],
        default=d.positions,
        help="eviction: replay decode positions, prompt positions (teacher-forced), or both",
    )
    parser.add_argument("--policy", default=d.policy, help="gates: residency policy")
    parser.add_argument("--read-json", default=d.read_json)


def run(args: argparse.Namespace) -> int:
    try:
        budgets = [float(b) / 100 for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        raise SpecdecError(f"--budgets {args.budgets!r}: give percents like 5,10,25") from None
    if not budgets or not all(0 < b <= 1 for b in budgets):
        raise SpecdecError(f"--budgets {args.budgets!r}: each must be in (0, 100]")
    opts = ProbeOptions(
        model=args.model,
        out=args.out,
        trace=args.trace,
        profile_trace=args.profile_trace,
        prompts=args.prompts,
        profile_prompts=args.profile_prompts,
        limit=args.limit,
        max_tokens=args.max_tokens,
        budgets=budgets,
        positions=args.positions,
        policy=args.policy,
        read_json=args.read_json,
    )
    names = [args.name] if args.name != "all" else list(NAMES)
    if args.name == "all" and not Path(args.read_json).is_file():
        print(
            f"probe all: {args.read_json} not found, read_path skipped (run `specdec bench read`)"
        )
        names.remove("read_path")
    if args.name == "all" and args.trace:
        print("probe all: gates needs the model's MoE inputs, not a trace: gates skipped")
        names.remove("gates")
    for name in names:
        run_probe(name, opts)
        suffix = f"_{opts.positions}" if name == "eviction" and opts.positions != "decode" else ""
        print(open(f"{opts.out}/{name}{suffix}.md").read())
    return 0
