"""`specdec trace`: record routing traces from a streamed model; read and write ds4 hotlists.

    specdec trace record tiny --out runs/trace-heldout                    # shipped code prompts
    specdec trace record tiny --prompts profile --out runs/trace-profile  # the disjoint set
    specdec trace record MODEL --prompts my.jsonl --max-tokens 64 --out DIR
    specdec trace record MODEL --prompts dataset:openai_humaneval --split test --out DIR
    specdec trace hotlist runs/trace-profile --out hot.txt     # ds4 hotlist from a trace
    specdec trace import-hotlist hot.txt --trace runs/trace-heldout   # check + summarise one
    specdec trace synth|stats|fit ...     # calibrated synthetic traces (specdec.cli.trace_synth)

What a recorded trace holds: specdec.probes.record (which runs the model); the format:
specdec.trace.format, docs/trace-format.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specdec.cli import output_path
from specdec.cli import trace_synth as synth_cli
from specdec.core.errors import SpecdecError
from specdec.core.files import check_replaceable
from specdec.trace.format import (
    TRACE_KIND,
    hotlist_keys,
    load_trace,
    profile_hotlist,
    read_hotlist,
    save_trace,
    write_hotlist,
)


def parse_distances(text: str) -> tuple[int, ...]:
    """`--lookahead 1,2,3` -> (1, 2, 3); each a positive whole number."""
    try:
        distances = tuple(int(d) for d in text.split(",") if d.strip())
    except ValueError:
        distances = (0,)
    if any(d < 1 for d in distances) or len(set(distances)) < len(distances):
        raise SpecdecError(
            f"--lookahead {text!r}: give distinct positive whole distances separated by commas "
            "(1,2,3), or '' for none"
        )
    return distances


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record", help="record a routing trace from a model")
    rec.add_argument("model", help="bundled model name, mlx-lm directory or packed directory")
    rec.add_argument("--prompts", default="heldout", help="heldout|profile|FILE|dataset:NAME")
    rec.add_argument("--out", type=output_path, required=True, help="trace directory to write")
    rec.add_argument("--max-tokens", type=int, default=32, help="decoded tokens per prompt")
    rec.add_argument("--max-prompt-tokens", type=int, default=256, help="truncate prompts")
    rec.add_argument("--limit", type=int, help="use only the first N prompts")
    rec.add_argument("--split", default="train", help="dataset split for dataset:NAME")
    rec.add_argument("--text-field", help="prompt field of the file/dataset (default: text)")
    rec.add_argument("--lookahead", default="1,2,3", help="lookahead distances d to record")
    rec.add_argument("--overwrite", action="store_true", help="replace an existing trace")
    hot = sub.add_parser("hotlist", help="write a ds4 hotlist profiled from a trace")
    hot.add_argument("trace", help="trace directory to profile")
    hot.add_argument("--out", type=output_path, required=True, help="hotlist file to write")
    hot.add_argument("--overwrite", action="store_true", help="replace an existing hotlist")
    imp = sub.add_parser("import-hotlist", help="check a ds4 hotlist against a trace")
    imp.add_argument("hotlist", help="ds4 hotlist file")
    imp.add_argument("--trace", required=True, help="trace whose layers/experts it must match")
    synth_cli.add_parsers(sub)


def run(args: argparse.Namespace) -> int:
    if args.action in synth_cli.ACTIONS:
        return synth_cli.run(args)
    if args.action == "record":
        if args.max_tokens < 1:
            raise SpecdecError(f"--max-tokens {args.max_tokens}: give at least 1")
        if args.out.exists() and not args.overwrite:
            raise SpecdecError(f"{args.out} exists: choose another --out or pass --overwrite")
        source = Path(args.model) if Path(args.model).is_dir() else None
        check_replaceable(args.out, TRACE_KIND, source, "`specdec trace record`", "--overwrite")
        distances = parse_distances(args.lookahead)
        from specdec.probes.record import record  # loads MLX: only for this action

        rec = record(
            args.model,
            args.prompts,
            args.max_tokens,
            args.max_prompt_tokens,
            distances,
            split=args.split,
            limit=args.limit,
            text_field=args.text_field,
        )
        save_trace(rec.trace, args.out, overwrite=args.overwrite)
        t = rec.trace
        print(
            f"{args.out}: {t.n_positions} positions ({int(t.phase.sum())} decoded) of "
            f"{int(t.prompt_ids.max()) + 1} prompts, {t.n_layers} MoE layers, top-{t.top_k}"
        )
    elif args.action == "hotlist":
        entries = profile_hotlist(load_trace(args.trace))
        write_hotlist(entries, args.out, args.overwrite)
        print(f"{args.out}: {len(entries)} (layer, expert) entries")
    else:
        trace = load_trace(args.trace)
        keys = hotlist_keys(trace, read_hotlist(args.hotlist))
        used = set(np.unique(trace.keys()).tolist())
        print(
            f"{args.hotlist}: {len(keys)} entries, all in {args.trace}'s "
            f"{trace.n_layers} layers; covers {len(used & set(keys))}/{len(used)} routed experts"
        )
    return 0
