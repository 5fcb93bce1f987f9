"""`specdec report DIR`: the report of a run or sweep directory (specdec.report.build_report).

specdec report runs/sweeps/main                     # writes runs/sweeps/main/report/
specdec report runs/sweeps/main --wandb disabled --alpha 0.7,0.8,0.9,1.0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec.cli import output_path
from specdec.report import build_report
from specdec.report.wandb_sink import MODES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="a run directory or a sweep directory (runs/sweeps/NAME)")
    p.add_argument("--out", type=output_path, help="where to write (default DIR/report)")
    p.add_argument("--wandb", default="offline", choices=MODES, help="log the report to wandb")
    p.add_argument(
        "--alpha",
        help="acceptances for best γ, e.g. 0.7,0.8,0.9,1.0 (default: the jobs' task.alphas)",
    )


def run(args: argparse.Namespace) -> int:
    from specdec.cli.union_model import _list, _number

    alphas = (
        None
        if args.alpha is None
        else [_number(a, "--alpha") for a in _list(args.alpha, "--alpha")]
    )
    print(build_report(args.dir, args.out, args.wandb, alphas).describe())
    return 0
