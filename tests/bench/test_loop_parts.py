"""specdec/bench/loop_parts.py on this CPU, the bundled model standing in for the GPU's shapes:
every variant decodes the same tokens as mlx-lm (the check that makes their times comparable
refuses one that does not), each timed in every round; and benchmarks/bench_cuda.py's
`loop_parts` step asks only for variants that exist, in the fresh processes and MLX settings
its docstring names (a wrong name found on the lent GPU costs its minutes), and a child that
fails loses only its own figures; `python -m analysis.cuda loop_parts | loop_profile` render what
the step saves, a failed child's error among the rows.

Run: `pytest tests/bench/test_loop_parts.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis import cuda
from specdec.bench import loop_parts as lp
from specdec.checkpoint.bundled import resolve_model
from tests.helpers import load_module

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cuda.py"
NAMES = list(lp.variants(SimpleNamespace(streamer=None, model=None), None, []))


def test_every_variant_decodes_mlx_lms_tokens_and_is_timed_each_round(monkeypatch, tmp_path):
    res = lp.loop_parts(str(resolve_model("tiny")), tokens=20, rounds=2)
    assert res["moe_layers"] == 4
    for name in NAMES:
        v = res[name]
        assert len(v["wall_us"]) == len(v["cpu_us"]) == 2 and min(v["wall_us"] + v["cpu_us"]) > 0
        assert v["wall_median"] == statistics.median(v["wall_us"])
    # each profile holds the call that starts its loop's tokens on the device
    ours = {r["function"] for r in res["profiles"]["ours"]}
    assert any("(greedy_next)" in f for f in ours), ours
    theirs = {r["function"] for r in res["profiles"]["mlx_lm_streamed"]}
    assert any("(generate_step)" in f for f in theirs), theirs

    # the tables the merged step gives: one row a variant, mlx-lm's own loop the baseline
    failed = {"error": "RuntimeError('loop_parts_child failed: boom')", "env": {}}
    saved = {"step": "loop_parts", "gpu": "NVIDIA H100 80GB HBM3, 81559 MiB", "tokens": 20,
             "qwen3": res, "qwen3 MLX_USE_CUDA_GRAPHS=0": failed}  # fmt: skip
    (tmp_path / "session99").mkdir()
    (tmp_path / "session99" / "loop_parts.json").write_text(json.dumps(saved))
    monkeypatch.setattr(cuda, "RESULTS", tmp_path)
    rows = [r.split(" | ") for r in cuda.loop_parts_table().splitlines()[2:]]
    assert [r[3] for r in rows] == NAMES + ["(failed)"]
    mine = {r[3]: r for r in rows if r[2] == "qwen3"}
    assert mine["mlx_lm_streamed"][5] == "+0" and mine["mlx_lm_resident"][6] == "1.00x"
    wall = res["ours"]["wall_median"]
    assert mine["ours"][4].startswith(f"{wall:.0f} (") and mine["ours"][0] == "| 99"
    assert "boom" in rows[-1][4] and rows[-1][2] == "qwen3 MLX_USE_CUDA_GRAPHS=0"
    prof = cuda.loop_profile_table(top=3).splitlines()[2:]
    assert len(prof) == 6 and "(greedy_next)" in "".join(prof[:3])


def test_a_variant_that_decodes_other_tokens_is_refused(monkeypatch):
    real = lp.variants

    def with_a_stray(sm, resident, prompt):
        stray = lambda n: ([0] * n, 1.0)  # noqa: E731
        return real(sm, resident, prompt) | {"stray": stray}

    monkeypatch.setattr(lp, "variants", with_a_stray)
    with pytest.raises(AssertionError, match="stray's tokens part"):
        lp.loop_parts(str(resolve_model("tiny")), 20, 1, only=["mlx_lm_resident", "stray"])
    with pytest.raises(ValueError, match="no loop_parts variant"):
        lp.loop_parts(str(resolve_model("tiny")), 20, 1, only=["ours", "no_such"])


def test_the_step_runs_each_shape_whole_then_the_qwen3_subset_under_each_gpu_setting(
    monkeypatch, tmp_path
):
    bench = load_module(BENCH)
    assert set(bench.LOOP_SUBSET) <= set(NAMES)
    calls = []
    monkeypatch.setattr(bench, "in_child", lambda f, argv, env: calls.append((f, argv, env)) or {})
    args = argparse.Namespace(shm=str(tmp_path), out=str(tmp_path / "out"), tokens=256, pairs=5,
                              session=1, step_t0=time.perf_counter(), loop_only="")  # fmt: skip
    (tmp_path / "out").mkdir()
    out = bench.loop_parts(args)
    q3, mm = str(tmp_path / "qwen3"), str(tmp_path / "minimax")
    assert calls == [
        ("loop_parts_child", [q3, 256, 5, None], {}),
        ("loop_parts_child", [mm, 256, 5, None], {}),
        ("loop_parts_child", [q3, 256, 5, bench.LOOP_SUBSET], {"MLX_USE_CUDA_GRAPHS": "0"}),
        (
            "loop_parts_child",
            [q3, 256, 5, bench.LOOP_SUBSET],
            {"MLX_CUDA_GRAPH_CACHE_SIZE": "4000"},
        ),
    ]
    assert list(out)[3:] == [
        "qwen3",
        "minimax",
        "qwen3 MLX_USE_CUDA_GRAPHS=0",
        "qwen3 MLX_CUDA_GRAPH_CACHE_SIZE=4000",
    ]
    # --loop-only: those variants on both shapes, nothing else
    calls.clear()
    args.loop_only = "ours,ours_replayed"
    assert list(bench.loop_parts(args))[3:] == ["qwen3", "minimax"]
    assert calls == [
        ("loop_parts_child", [d, 256, 5, ["ours", "ours_replayed"]], {}) for d in (q3, mm)
    ]


def test_a_child_that_fails_is_reported_and_the_next_still_runs(monkeypatch, tmp_path):
    bench = load_module(BENCH)
    seen = []

    def child(f, argv, env):
        seen.append(env)
        if env.get("MLX_USE_CUDA_GRAPHS") == "0":
            raise RuntimeError("loop_parts_child with {...} failed: boom")
        return {"ours": {}}

    monkeypatch.setattr(bench, "in_child", child)
    args = argparse.Namespace(shm=str(tmp_path), out=str(tmp_path / "out"), tokens=20, pairs=1,
                              session=1, step_t0=time.perf_counter(), loop_only="")  # fmt: skip
    (tmp_path / "out").mkdir()
    out = bench.loop_parts(args)
    failed = out["qwen3 MLX_USE_CUDA_GRAPHS=0"]
    assert "boom" in failed["error"] and failed["env"] == {"MLX_USE_CUDA_GRAPHS": "0"}
    assert len(seen) == 4 and out["qwen3 MLX_CUDA_GRAPH_CACHE_SIZE=4000"] == {"ours": {}}
