"""`specdec bench speedup`: speculative decoding against plain decoding in measured seconds, each
run in lockstep with a plain run of its own (or, `--pairing between`, between two on one loaded
model); the break-even α per γ (specdec/bench/speedup.py).

    specdec bench speedup --model DIR --budget 25% --drafters oracle:1,oracle:0.9,oracle:0.8 \
        --gammas 3,4 --tokens 64 --profile m4-24gb --out speedup.json
"""

from __future__ import annotations

import argparse
import json

from specdec.checkpoint.bundled import DEFAULT_MODEL, DEFAULT_PROMPT
from specdec.cli import output_path
from specdec.core.units import DEFAULT_BUDGET


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="bundled name, mlx-lm or packed dir")
    p.add_argument("--budget", default=DEFAULT_BUDGET,
                   help="each side's cache (the model loads twice: twice this in memory)")  # fmt: skip
    p.add_argument("--drafters", default="oracle:1,oracle:0.9,oracle:0.8",
                   help="comma-separated drafters; oracle:α at two α or more gives break-even")  # fmt: skip
    p.add_argument("--gammas", default="3,4", help="comma-separated γ >= 2, or auto")
    p.add_argument("--tokens", type=int, default=64, help="tokens decoded per run")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt, as given (no template)")
    p.add_argument("--routing", help="a routing trace every MoE layer follows (a .trace dir)")
    p.add_argument("--profile", help="a device profile to model each run on beside")
    p.add_argument("--pairing", choices=("lockstep", "between"), default="lockstep",
                   help="lockstep: each run beside a plain run of its own, a pass of each in turn "
                        "(two caches); between: one model, each run between two plain runs "
                        "(one cache: where two do not fit; the machine's drift shows in the "
                        "result)")  # fmt: skip
    p.add_argument("--out", type=output_path, help="write the result as JSON here (a new file)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from specdec.bench.speedup import SpeedupConfig, measure_speedup, speedup_lines
    from specdec.core.files import check_output_file
    from specdec.core.machine import write_result
    from specdec.gamma.spec import Gamma

    cfg = SpeedupConfig(
        model=args.model,
        budget=args.budget,
        drafters=tuple(d for d in args.drafters.split(",") if d),
        gammas=tuple(Gamma.parse(g).label for g in args.gammas.split(",") if g),
        tokens=args.tokens,
        prompt=args.prompt,
        routing=args.routing,
        profile=args.profile,
        pairing=args.pairing,
    )
    if args.out:  # before minutes of decoding, not after (measure_speedup checks cfg first)
        check_output_file(args.out, "specdec bench speedup", flag=None)
    result = measure_speedup(cfg)
    if args.out:  # without this machine's paths (the home directory as ~): results travel
        write_result(args.out, result)
    print(json.dumps(result, indent=1) if args.json else "\n".join(speedup_lines(result)))
    return 0
