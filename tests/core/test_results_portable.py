"""Benchmark results name no machine's paths: host.machine.write_result.

pytest tests/core/test_results_portable.py
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from specdec.core.machine import write_result

ROOT = Path(__file__).resolve().parents[2]


def test_write_result_replaces_scratch_repo_and_home_paths(tmp_path):
    scratch = tmp_path / "scratch"
    result = {
        "model": str(scratch / "qwen3"),
        "command": f"bench --dir {scratch} --model {ROOT / 'specdec/models/tiny'}",
        "home": str(Path.home() / "models" / "x"),
        "repo": str(ROOT),
    }
    out = tmp_path / "r.json"
    write_result(out, result, {scratch: "DIR"})
    assert json.loads(out.read_text()) == {
        "model": "DIR/qwen3",
        "command": "bench --dir DIR --model specdec/models/tiny",
        "home": "~/models/x",
        "repo": ".",
    }


def test_no_tracked_result_names_a_machine_path():
    files = subprocess.run(
        ["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert files
    for f in files:
        text = (ROOT / f).read_text(errors="replace")
        assert str(ROOT) not in text and str(Path.home()) + "/" not in text, f
