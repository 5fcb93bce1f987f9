"""Read-path benchmark: writes benchmarks/results/read.json (with the machine it ran on).

Run: `python benchmarks/bench_read.py [--rounds 10] [--dir /path/on/real/disk]` from the repo
root (takes ~2 minutes). Needs `fio` for the device limit (`apt-get install -y fio`); without it
the JSON's "fio" is null. Same options as `specdec bench read`, which prints instead of writing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.blas import ensure_fast_blas  # noqa: E402
from specdec.store import readbench  # noqa: E402
from specdec.store.files import durable_replace  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "read.json"


def main() -> int:
    ensure_fast_blas()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    readbench.add_arguments(parser)
    args = parser.parse_args()
    result = readbench.bench_from_args(args)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULT.with_name(RESULT.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    durable_replace(tmp, RESULT)
    print(readbench.format_table(result))
    print(json.dumps(result["checks"], indent=1))
    print(f"wrote {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
