"""benchmarks/bench_host_steps.py runs here (the bundled model, a short run): both sides timed
every round, their tokens equal (the script refuses otherwise). Its figures are a benchmark's,
not asserted here.

Run: `pytest tests/bench/test_bench_host_steps.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_host_steps.py"


def test_both_sides_are_timed_each_round_on_the_same_tokens(tmp_path):
    out = tmp_path / "host_steps.json"
    cmd = [sys.executable, str(SCRIPT), "--tokens", "20", "--rounds", "2", "--out", str(out)]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["moe_layers"] == 4 and res["tokens"] == 20
    for side in ("counted", "replayed"):
        v = res[side]
        assert len(v["catch_up_us"]) == len(v["join_us"]) == len(v["wall_us"]) == 2
        assert min(v["catch_up_us"] + v["join_us"] + v["wall_us"]) > 0
