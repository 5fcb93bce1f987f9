"""benchmarks/bench_cuda.py's `repeat` and `forced` steps run through on this CPU, the bundled
model standing in for the 16-layer pack and the 2-layer MiniMax shape: a mistake in a step costs
the lent GPU's minutes (30 a session) only where it is found there. On one CPU a run repeats
itself bit for bit, so both steps report no departure here.

Run: `pytest tests/bench/test_bench_cuda_cpu.py`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from specdec.checkpoint.bundled import resolve_model
from specdec.trace.format import save_trace
from specdec.trace.synthetic import synthetic_trace

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cuda.py"


def test_repeat_and_forced_run_through_and_find_every_run_repeating(tmp_path):
    tiny = resolve_model("tiny")
    disk, shm, out = tmp_path / "disk", tmp_path / "shm", tmp_path / "out"
    disk.mkdir()
    pack = [sys.executable, "-m", "specdec", "pack", str(tiny), str(disk / "mm16.packed")]
    subprocess.run(pack, check=True, capture_output=True, timeout=120)
    # the bundled model's routed shape: 4 MoE layers, top-4 of 32
    save_trace(synthetic_trace(256, n_layers=4, n_experts=32, top_k=4), disk / "minimax.trace")
    shutil.copytree(tiny, shm / "minimax")  # `forced` and `repeat`'s mlx-lm part read it there
    cmd = [sys.executable, str(BENCH), "--shm", str(shm), "--disk", str(disk), "--out", str(out),
           "--tokens", "48", "repeat", "forced"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    repeat = json.loads((out / "repeat.json").read_text())
    assert "error" not in repeat, repeat.get("traceback")
    runs = {k: v["departs"] for k, v in repeat["streamed"].items()}
    assert runs == {"100%": [None, None], "9GB": [None]}, runs
    assert repeat["mlx_lm"]["minimax"]["departs"] == [None]
    forced = json.loads((out / "forced.json").read_text())
    assert "error" not in forced, forced.get("traceback")
    for pair in ("resident_vs_resident", "streamed_vs_streamed"):
        assert forced[pair]["first_step_differing"] is None and forced[pair]["largest"] == 0.0
    assert forced["streamed_vs_resident"]["argmax_differs"] == 0
    for part in ("attention_alone", "attention_alone_cudnn_sdpa_off"):
        alone = forced[part]
        assert alone["steps"] == 48
        for dtype in ("bfloat16", "float32"):
            assert len(alone[dtype]) == 2, "the second and third run against the first"
            for later in alone[dtype]:
                assert later["first_step_differing"] is None and later["largest"] == 0.0
    assert forced["attention_alone_cudnn_sdpa_off"]["env"] == {"MLX_CUDA_USE_CUDNN_SDPA": "0"}
