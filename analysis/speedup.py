"""The table of a `specdec bench speedup` result: each drafter and γ against the plain run beside
it, in measured seconds, and the break-even α per γ.

    python -m analysis.speedup benchmarks/results/speedup-tiny.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis._runs import md_table
from specdec.bench.speedup import break_even_lines


def speedup_table(path: Path) -> str:
    result = json.loads(path.read_text())
    profile = result["config"]["profile"]
    body = []
    for r in result["rows"]:
        modeled = r.get(f"modeled_speedup/{profile}")
        ratio = r["bytes_per_token_vs_plain"]
        body.append([
            r["drafter"], r["gamma"], "—" if r["acceptance"] is None else f"{r['acceptance']:.2f}",
            f"{r['plain_tokens_per_s']:.1f}", f"{r['tokens_per_s']:.1f}", f"{r['speedup']:.2f}x",
            "—" if modeled is None else f"{modeled:.2f}x", "—" if ratio is None else f"{ratio:.2f}x",
            "equal" if r["tokens_equal"] else "depart",
        ])  # fmt: skip
    heads = ["drafter", "γ", "acceptance", "plain tok/s", "tok/s", "speed-up, measured",
             f"modeled ({profile})", "bytes/token vs plain", "tokens vs plain"]  # fmt: skip
    breaks = [f"- {line}" for line in break_even_lines(result)]
    return md_table(heads, body) + "\n" + "\n".join(breaks) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", type=Path, help="a `specdec bench speedup --out` file")
    print(speedup_table(p.parse_args(argv).result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
