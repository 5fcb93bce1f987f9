"""benchmarks/bench_gamma_auto.py `host --pack-only` runs here (the CUDA sessions' 16-layer pack
in replay, a short run, on a session's profile): each round times plain and auto, and only auto's
row carries its bookkeeping's parts, which add up to less than its whole run (the lanes' passes
within the feed); a run longer than the trace (or none) is refused in one line. Its figures are
a benchmark's, not asserted here.

Run: `pytest tests/bench/test_bench_gamma_auto_host.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_gamma_auto.py"
PROFILE = ROOT / "benchmarks" / "results" / "cuda" / "h200-r34.yaml"
PARTS = ("GammaChooser.choose", "Shadows.feed", "GammaChooser.observe")


def test_host_times_auto_and_its_bookkeeping_beside_plain_on_a_sessions_profile(tmp_path):
    out = tmp_path / "host.json"
    cmd = [sys.executable, str(SCRIPT), "host", "--pack-only", "--tokens", "24", "--rounds", "2",
           "--profile", str(PROFILE), "--out", str(out)]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads(out.read_text())
    assert "--pack-only" in res["meta"]["command"]
    rows = res["rows"]
    assert [r["run"].rsplit(" ", 1)[1] for r in rows] == ["1", "auto"] * 2
    assert all("24 tokens on h200-r34" in r["run"] and r["tokens"] == 24 for r in rows)
    for row in rows:
        parts = [row.get(f"{p}_us_per_token") for p in PARTS]
        lanes = row.get("Shadows._pass_us_per_token")
        if row["run"].endswith("auto"):
            assert 0 < sum(parts) < row["wall_us_per_token"]
            assert 0 < lanes < row["Shadows.feed_us_per_token"]
        else:  # plain never asks the chooser
            assert parts == [None] * 3 and lanes is None


def test_host_refuses_a_run_longer_than_the_trace_in_one_line(tmp_path):
    out = tmp_path / "host.json"
    for tokens in ("0", "4001"):
        cmd = [sys.executable, str(SCRIPT), "host", "--pack-only", "--tokens", tokens,
               "--out", str(out)]  # fmt: skip
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert got.returncode == 2 and "replays 1-4000" in got.stderr.splitlines()[-1]
        assert "Traceback" not in got.stderr and not out.exists()
