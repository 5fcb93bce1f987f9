"""docs/results/read-path.md: GB/s of each way into MLX (and fio) at each thread count.

python benchmarks/bench_read.py              # writes benchmarks/results/read.json
python -m analysis.read_path benchmarks/results/read.json   # or a probe output directory
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis._runs import fail, md_table, probe_rows
from specdec.core.errors import SpecdecError
from specdec.probes.read_path import load_read_json, read_path_table


def table(rows: list[dict]) -> str:
    threads = sorted({r["threads"] for r in rows})
    gbps = {(r["description"], r["threads"]): r["gbps"] for r in rows}
    paths = sorted(
        dict.fromkeys(r["description"] for r in rows),
        key=lambda d: -max(v for (n, _), v in gbps.items() if n == d),
    )
    body = [[d] + [f"{gbps[d, t]:.2f}" if (d, t) in gbps else "" for t in threads] for d in paths]
    block = rows[0]["block_bytes"] / 1e6
    return md_table([f"path ({block:.2f} MB blocks)"] + [f"GB/s, {t} thr." for t in threads], body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", help="`specdec bench read --json` output, or a probe directory")
    args = p.parse_args(argv)
    try:
        src = Path(args.source)
        rows = (
            probe_rows(src, "read_path") if src.is_dir() else read_path_table(load_read_json(src))
        )
        print(table(rows), end="")
    except SpecdecError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
