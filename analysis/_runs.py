"""What the analysis scripts share: finding a table in a run directory, and markdown output.

A run directory is either what `specdec probe NAME --out DIR` writes (DIR/NAME.json) or a
`specdec-exp` job or sweep directory (a job's tables/NAME.json, read through specdec.report.rundir).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from specdec.core.errors import SpecdecError
from specdec.probes.report import md_table
from specdec.report.collect import Job, collect_jobs

__all__ = ["decoding_jobs", "fail", "md_table", "probe_rows", "probe_table_main"]


def probe_rows(run_dir: str | Path, name: str) -> list[dict]:
    """The rows of probe `name` from a probe output directory or a specdec-exp run directory."""
    run_dir = Path(run_dir)
    direct = run_dir / f"{name}.json"
    if direct.exists():
        return json.loads(direct.read_text())
    for job in collect_jobs(run_dir):
        if name in job.tables:
            return job.tables[name]
    raise SpecdecError(f"{run_dir} holds no {name} table: run `specdec probe {name}` into it first")


def decoding_jobs(run_dir: str | Path) -> list[Job]:
    """The finished jobs under `run_dir` that decoded (have per-pass records)."""
    jobs = [j for j in collect_jobs(Path(run_dir)) if j.records]
    if not jobs:
        raise SpecdecError(f"{run_dir} holds no decoding job: run `specdec-exp -m ...` into it")
    return jobs


def fail(e: SpecdecError) -> int:
    print(f"error: {e}", file=sys.stderr)
    return 2


def probe_table_main(doc: str, name: str, table: Callable[[list[dict]], str], argv) -> int:
    """The command line of a script that tabulates probe `name` from one run directory."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("run_dir", help="probe output directory or specdec-exp run directory")
    args = p.parse_args(argv)
    try:
        print(table(probe_rows(args.run_dir, name)), end="")
    except SpecdecError as e:
        return fail(e)
    return 0
