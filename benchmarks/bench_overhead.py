"""Host-overhead benchmark: writes benchmarks/results/overhead[-NAME].json (with the machine).

Run from the repo root: `python benchmarks/bench_overhead.py [--model tiny] [--tokens 128]
[--pairs 7] [--name NAME] [--cli-only --prompt TEXT]` (specdec.bench.overhead says what is
measured; --cli-only runs only the fresh-process pairs, for real-shape models whose forward takes
seconds on a CPU). It times decode: other work
on the cores distorts it, so pairs are interleaved and medians with ranges reported; the load
average is recorded. Targets (issue 13): at full budget, `specdec generate` >= 0.95x
`python -m mlx_lm generate` in fresh processes (median of >= 7 pairs, 128 tokens, same BLAS), on
the bundled model and on a real-shape checkpoint; host cost <= 60 µs per MoE layer all in; router
lookahead L+2 adds <= 10 µs per layer of host time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.bench import overhead  # noqa: E402
from specdec.cli.model import add_overhead_arguments  # noqa: E402
from specdec.core.blas import ensure_fast_blas  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ensure_fast_blas()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_overhead_arguments(parser)
    parser.add_argument("--name", default="", help="results file suffix (overhead-NAME.json)")
    parser.add_argument("--note", default="", help="what the model is, stored with the result")
    parser.add_argument(
        "--cli-only", action="store_true", help="only the fresh-process pairs (a model whose "
        "forward takes seconds: the in-process parts would take hours)",
    )  # fmt: skip
    parser.add_argument("--prompt", default=overhead.PROMPT, help="prompt (--cli-only)")
    args = parser.parse_args()
    if args.cli_only:
        cli = overhead.cli_pairs(args.model, args.tokens, args.pairs, prompt=args.prompt)
        result = {"model": args.model, "tokens": args.tokens, "cli": cli}
    else:
        result = overhead.measure_overhead(
            args.model, args.tokens, args.pairs, args.lookahead_budget, args.repeats
        )
    result["note"] = args.note
    result["targets"] = {"cli_ratio": 0.95, "added_us_per_moe_layer": 60, "lookahead_us": 10}
    result["machine"] = machine_info()
    out = RESULTS / (f"overhead-{args.name}.json" if args.name else "overhead.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    model_dir = {args.model: "MODEL_DIR"} if Path(args.model).is_dir() else {}  # not a bundled name
    write_result(out, result, model_dir)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
