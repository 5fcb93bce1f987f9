"""benchmarks/bench_cuda.py's `repeat`, `forced`, `attention_speed`, `ties` and `first_tokens` steps run through
on this CPU, the bundled model standing in for the 16-layer pack and the 2-layer MiniMax shape: a
mistake in a step costs the lent GPU's minutes (30 a session) only where it is found there. On one
CPU a run repeats itself bit for bit, so `repeat` and `forced` report no departure here; the CPU
ignores MLX_CUDA_USE_CUDNN_SDPA, so `attention_speed` is a run-through, its speeds compared on a
GPU only. `ties` holds here, and finds a pick that takes the higher of two tied indices and one
that breaks ties by the rows in a call.

Run: `pytest tests/bench/test_bench_cuda_cpu.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import pytest

from specdec.checkpoint.bundled import resolve_model
from specdec.core.attention import CUDNN_SDPA
from specdec.decode import state
from specdec.trace.format import save_trace
from specdec.trace.synthetic import synthetic_trace
from tests.helpers import load_module

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
    got = subprocess.run(cmd, env=_mlx_default_env(), capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    repeat = json.loads((out / "repeat.json").read_text())
    assert "error" not in repeat, repeat.get("traceback")
    runs = {k: v["departs"] for k, v in repeat["streamed"].items()}
    assert runs == {"100%": [None, None], "9GB": [None]}, runs
    assert repeat["mlx_lm"]["minimax"]["departs"] == [None]
    forced = json.loads((out / "forced.json").read_text())
    assert "error" not in forced, forced.get("traceback")
    for pair in (
        "resident_vs_resident",
        "streamed_vs_streamed",
        "resident_vs_resident_cudnn_sdpa_off",
    ):
        assert forced[pair]["first_step_differing"] is None and forced[pair]["largest"] == 0.0
    assert forced["streamed_vs_resident"]["argmax_differs"] == 0
    for part in ("attention_alone", "attention_alone_cudnn_sdpa_off"):
        alone = forced[part]
        assert alone["steps"] == 48
        for dtype in ("bfloat16", "float32"):
            assert len(alone[dtype]) == 2, "the second and third run against the first"
            for later in alone[dtype]:
                assert later["first_step_differing"] is None and later["largest"] == 0.0
    # this process ran with specdec's default (0); the child with MLX's (1), its keys unsuffixed
    assert forced["cudnn_sdpa"] == "0"
    for part in ("attention_alone", "resident_vs_resident"):
        assert forced[part]["env"] == {"MLX_CUDA_USE_CUDNN_SDPA": "1"}
        assert "env" not in forced[part + "_cudnn_sdpa_off"]


def test_attention_speed_runs_mlx_lm_with_each_setting_in_turn(tmp_path):
    shm = tmp_path / "shm"
    shutil.copytree(resolve_model("tiny"), shm / "minimax")
    res = _step(tmp_path, "attention_speed", "--tokens", "512", "--pairs", "2")
    rates = res["tokens_per_s"]
    assert [len(rates["cudnn_sdpa_1"]), len(rates["cudnn_sdpa_0"])] == [2, 2]
    assert all(r > 0 for r in rates["cudnn_sdpa_1"] + rates["cudnn_sdpa_0"])


@pytest.mark.parametrize(
    ("step", "tokens", "least"),
    # below 256 keys; no rest; no held batch's end
    [("attention_speed", 200, 512), ("first_tokens", 17, 20), ("loop_parts", 17, 20)],
)
def test_a_step_given_too_few_tokens_is_refused_before_any_step(tmp_path, step, tokens, least):
    cmd = [sys.executable, str(BENCH), "--shm", str(tmp_path), "--disk", str(tmp_path),
           "--out", str(tmp_path / "out"), "--tokens", str(tokens), step]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and f"--tokens >= {least} (got {tokens})" in got.stderr, got.stderr
    assert not (tmp_path / "out" / f"{step}.json").exists()


def test_first_tokens_times_each_token_on_both_sides_in_alternating_fresh_processes(tmp_path):
    shm = tmp_path / "shm"
    for key in ("qwen3", "minimax"):  # the bundled model standing in for both shapes
        shutil.copytree(resolve_model("tiny"), shm / key)
    res = _step(tmp_path, "first_tokens", "--tokens", "20", "--pairs", "2")
    for key in ("qwen3", "minimax"):
        runs = res[key]["runs"]
        sides = [r["side"] for r in runs]
        assert sides == ["ours", "ours_stream", "mlx_lm", "ours_stream", "mlx_lm", "ours"]
        for r in runs:
            walls = r["walls_ms"]
            assert len(walls) == 19, "every decode token after the first, on either side"
            assert r["first_ms"] == sum(walls[:16]) / 16 and r["rest_ms"] == sum(walls[16:]) / 3
        ours = [r["rest_ms"] for r in runs if r["side"] == "ours"]
        assert res[key]["ours"]["rest_ms"] == sum(ours) / 2  # the median of two


def _step(tmp_path: Path, step: str, *args: str) -> dict:
    """bench_cuda.py's `step` run with tmp_path's shm/ (the models), disk/ and out/: its JSON."""
    out = tmp_path / "out"
    cmd = [sys.executable, str(BENCH), "--shm", str(tmp_path / "shm"), "--disk",
           str(tmp_path / "disk"), "--out", str(out), *args, step]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads((out / f"{step}.json").read_text())
    assert "error" not in res, res.get("traceback")
    return res


def _mlx_default_env() -> dict[str, str]:
    """This environment without MLX_CUDA_USE_CUDNN_SDPA: the child takes specdec's default."""
    return {k: v for k, v in os.environ.items() if k != CUDNN_SDPA}


def test_ties_hold_here_and_catch_a_pick_of_the_higher_index(monkeypatch):
    ties, argmax_picks = load_module(BENCH).ties, state.argmax_picks
    got = ties(None, vocabs=(4099,), trials=4)
    assert got["all_hold"], got
    assert got["cases"]["4099/bfloat16"] == {"rows": 32, "as_decoded_alone": 32, "lower_index": 32}

    def higher(lp: mx.array):  # the last of the maxima: reversed rows' first
        last = lp.shape[-1] - 1 - mx.argmax(lp[:, ::-1], axis=-1)
        return last, mx.take_along_axis(lp, last[:, None], axis=-1)[:, 0]

    monkeypatch.setattr(state, "argmax_picks", higher)
    got = ties(None, vocabs=(4099,), trials=4)["cases"]["4099/float32"]
    assert got["lower_index"] == 0 and got["as_decoded_alone"] == 32  # higher alone too

    def by_rows(lp: mx.array):  # a tie-break that depends on the rows in a call
        return higher(lp) if lp.shape[0] > 1 else argmax_picks(lp)

    monkeypatch.setattr(state, "argmax_picks", by_rows)
    got = ties(None, vocabs=(4099,), trials=4)
    assert not got["all_hold"] and got["cases"]["4099/bfloat16"]["as_decoded_alone"] == 0


def test_overhead_runs_only_the_shapes_named(monkeypatch, tmp_path):
    """`--exact-models minimax overhead`: the MiniMax shape alone (a short lease's choice)."""
    bench = load_module(BENCH)
    ran = []
    monkeypatch.setattr(bench, "launch_ab", lambda src: ran.append(src.name) or {})
    monkeypatch.setattr("specdec.bench.overhead.in_process", lambda *a: {})
    monkeypatch.setattr("specdec.bench.overhead.cli_pairs", lambda *a, **k: {})
    args = argparse.Namespace(shm=str(tmp_path), out=str(tmp_path), pairs=1, session=1,
                              exact_models="minimax", step_t0=time.perf_counter())  # fmt: skip
    out = bench.overhead(args)
    assert ran == ["minimax"] and set(out) == {"launch_ab", "minimax"}
