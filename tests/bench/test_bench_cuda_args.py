"""benchmarks/bench_cuda.py refuses, before any step runs, steps whose runs need a profile it
does not have: found after `big` (minutes on the lent GPU) the same error cost device time.

Run: `pytest tests/bench/test_bench_cuda_args.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cuda.py"


def _bench(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    dirs = ("--shm", str(tmp_path / "shm"), "--disk", str(tmp_path / "disk"))
    return subprocess.run([sys.executable, str(BENCH), *dirs, "--out", str(tmp_path / "out"),
                           *argv], capture_output=True, text=True, timeout=120)  # fmt: skip


def test_priced_steps_without_a_profile_are_refused_before_any_step(tmp_path):
    got = _bench(tmp_path, "big", "auto", "drafters")
    assert got.returncode == 2 and "Traceback" not in got.stderr
    last = got.stderr.strip().splitlines()[-1]
    assert "the runs of auto, drafters are priced on" in last and "--profile PATH" in last
    assert not (tmp_path / "disk").exists()  # nothing made: `big` did not start


def test_a_given_profile_lets_them_past_the_check(tmp_path):
    """With --profile naming a file the check passes and the step prices on that file (here an
    incomplete one, so the step stops at once and keeps the error naming it in its result)."""
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\n")
    got = _bench(tmp_path, "--profile", str(prof), "auto")
    assert got.returncode == 0, got.stderr
    assert "[auto] start" in got.stdout
    error = json.loads((tmp_path / "out" / "auto.json").read_text())["error"]
    assert "p.yaml" in error  # the profile given, not DIR/h200.yaml
