"""Does speculation pay at MiniMax scale? Bytes per committed token against γ and α, replayed.

    .venv/bin/python -m analysis.speculation_at_scale              # ~2-4 min CPU, 2000 positions
    .venv/bin/python -m analysis.speculation_at_scale --positions 4000 --seed 1 --out /tmp/s.md

Synthesizes the calibrated MiniMax-M2.5 trace (`specdec trace synth --like minimax-m2.5`, into a
temporary directory deleted afterwards), replays it in verify passes (specdec.sim.replay) at
3, 6, 9 and 12 GB for each policy, γ and α, and writes docs/speculation-at-scale.md: bytes per
committed token, the break-even α (bytes and modeled time) beside the question's
k·(1 + 0.58·(γ − 1)) model and the independence formula, modeled tokens/s on the M4 profile,
and which of the question's §3 claims hold (the text: analysis/_scale_text.py).
Prints the section of docs/results/minimax-scale.md. Test: tests/report/test_speculation_at_scale.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from analysis._scale_sweep import sweep, synthesize
from analysis._scale_text import render


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/speculation-at-scale.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace = synthesize(args.positions, args.seed, tmp)
    sw = sweep(trace, seed=args.seed)
    doc, readme = render(sw, args)
    tmp_out = Path(args.out).with_suffix(".tmp")
    tmp_out.write_text(doc)
    tmp_out.replace(args.out)
    print(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
