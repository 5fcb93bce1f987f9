"""read_path: the question's §5 read-path table on this machine, from the store's read bench.

Runs `specdec probe read_path` on `task.options.read_json` (default
benchmarks/results/read.json, written by `specdec bench read --json`). Headline: the fastest
measured path's throughput in GB/s.

    specdec-exp experiment=read_path task.options.read_json=benchmarks/results/read.json
"""

from __future__ import annotations

from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._probe import run_probe_task


def _best_gbps(rows: list[dict]) -> float:
    return max(r["gbps"] for r in rows if not r["path"].startswith("fio_"))


def run(cfg, run_dir: Path) -> TaskResult:
    return run_probe_task("read_path", cfg, run_dir, "best_gbps", _best_gbps)
