"""A device session's output folders merged into the CUDA results: benchmarks/merge_cuda.py.

pytest tests/bench/test_merge_cuda.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import LENT_HOME, load_module

ROOT = Path(__file__).resolve().parents[2]
merge_cuda = load_module(ROOT / "benchmarks" / "merge_cuda.py")

PROFILE = f"""# h200: written by `specdec bench device`
name: h200
description: 'h200: measured by `specdec bench device` (Intel(R) Xeon(R) Processor)'
sources:
  read_curve: 'read bench, pack {LENT_HOME}/runs/big.packed: 4096 blocks'
"""


def _results(tmp: Path) -> Path:
    """A results folder as the repository has it: spec.json with one earlier session's run."""
    res = tmp / "results"
    res.mkdir()
    earlier = {"step": "spec", "runs": [{"tokens_per_s": 1.0, "session": 18}], "sessions": {}}
    (res / "spec.json").write_text(json.dumps(earlier))
    (res / "spec.jsonl").write_text('{"records": []}\n')
    return res


def _out(tmp: Path, name: str, command: str) -> Path:
    """What one bench_cuda.py --out folder holds after `models profile spec`."""
    out = tmp / name
    out.mkdir()
    runs = [{"tokens_per_s": 5.2, "budget": "9GB"}, {"tokens_per_s": 6.5, "budget": "9GB"}]
    step = {"step": "spec", "seconds": 60.0, "command": command, "gpu": "NVIDIA H100",
            "machine": {"cwd": f"{LENT_HOME}/runs"}, "runs": runs}  # fmt: skip
    (out / "spec.json").write_text(json.dumps(step))
    (out / "spec.jsonl").write_text('{"records": [1]}\n{"records": [2]}\n')
    (out / "models.json").write_text(json.dumps({"step": "models", "dir": f"{LENT_HOME}/runs/mm"}))
    (out / "profile_details.json").write_text(
        json.dumps({"source": f"{LENT_HOME}/runs/big.packed"})
    )
    (out / "h200.yaml").write_text(PROFILE)
    return out


def test_a_session_merges_once_with_its_profile_renamed_and_no_home_path(tmp_path):
    res = _results(tmp_path)
    out = _out(tmp_path, "out1", "bench_cuda.py --session 19 spec")
    merge_cuda.merge([out], 19, "h100", res)
    spec = json.loads((res / "spec.json").read_text())
    assert [r.get("session") for r in spec["runs"]] == [18, 19, 19]
    assert spec["sessions"]["19"] == [
        {
            "seconds": 60.0,
            "command": "bench_cuda.py --session 19 spec",
            "gpu": "NVIDIA H100",
            "machine": {"cwd": "~/runs"},
        }  # fmt: skip
    ]
    assert (res / "spec.jsonl").read_text().splitlines() == [
        '{"records": []}', '{"records": [1]}', '{"records": [2]}'
    ]  # fmt: skip
    profile = (res / "h100-r19.yaml").read_text()
    assert "name: h100-r19\n" in profile and "'h100-r19: measured" in profile
    assert "# h100-r19: written" in profile and "h200" not in profile
    assert json.loads((res / "session19" / "models.json").read_text())["dir"] == "~/runs/mm"
    for f in res.rglob("*"):
        assert f.is_dir() or f"{LENT_HOME}/" not in f.read_text(), f
    before = {f: f.read_bytes() for f in res.rglob("*") if f.is_file()}
    again = _out(tmp_path, "out2", "bench_cuda.py --session 19 spec")  # the same command
    with pytest.raises(merge_cuda.MergeError, match="already merged"):
        merge_cuda.merge([again], 19, "h100", res)
    assert {f: f.read_bytes() for f in res.rglob("*") if f.is_file()} == before


def test_nothing_is_written_when_one_folder_cannot_be_merged(tmp_path):
    res = _results(tmp_path)
    good = _out(tmp_path, "out1", "bench_cuda.py --session 19 spec")
    empty = tmp_path / "empty"
    empty.mkdir()
    before = {f: f.read_bytes() for f in res.rglob("*") if f.is_file()}
    with pytest.raises(merge_cuda.MergeError, match="no bench_cuda.py results"):
        merge_cuda.merge([good, empty], 19, "h100", res)
    assert {f: f.read_bytes() for f in res.rglob("*") if f.is_file()} == before


def test_a_step_run_twice_in_a_session_keeps_both_runs_and_tables_read_both(tmp_path, monkeypatch):
    res = _results(tmp_path)
    outs = []
    for name in ("out1", "out2"):
        out = tmp_path / name
        out.mkdir()
        step = {"step": "first_tokens", "command": f"bench_cuda.py --out ~/{name} first_tokens"}
        (out / "first_tokens.json").write_text(json.dumps(step))
        outs.append(out)
    merge_cuda.merge(outs, 31, "h100", res)
    kept = {p.name: json.loads(p.read_text())["command"] for p in (res / "session31").iterdir()}
    assert kept == {
        "first_tokens.json": "bench_cuda.py --out ~/out1 first_tokens",
        "first_tokens-2.json": "bench_cuda.py --out ~/out2 first_tokens",
    }
    before = {f: f.read_bytes() for f in res.rglob("*") if f.is_file()}
    with pytest.raises(merge_cuda.MergeError, match="already merged"):
        merge_cuda.merge(outs[1:], 31, "h100", res)
    assert {f: f.read_bytes() for f in res.rglob("*") if f.is_file()} == before
    # a third run goes past the last one kept, where an earlier one was renamed or removed
    (res / "session31" / "first_tokens-2.json").rename(res / "session31" / "first_tokens-3.json")
    third = tmp_path / "out3"
    third.mkdir()
    (third / "first_tokens.json").write_text(json.dumps({"command": "bench_cuda.py --out 3"}))
    merge_cuda.merge([third], 31, "h100", res)
    assert sorted(p.name for p in (res / "session31").iterdir()) == [
        "first_tokens-3.json", "first_tokens-4.json", "first_tokens.json"
    ]  # fmt: skip
    assert json.loads((res / "session31" / "first_tokens-3.json").read_text())["command"] == (
        "bench_cuda.py --out ~/out2 first_tokens"
    )

    # analysis.cuda reads both, in order, and no other step's file that shares the prefix
    from analysis import cuda

    (res / "session31" / "first_tokens_extra.json").write_text("{}")
    (res / "session30").mkdir()
    (res / "session30" / "first_tokens.json").write_text("{}")
    monkeypatch.setattr(cuda, "RESULTS", res)
    found = [(s, p.name) for s, p in cuda._session_results("first_tokens.json")]
    assert found == [(30, "first_tokens.json"), (31, "first_tokens.json"),
                     (31, "first_tokens-3.json"), (31, "first_tokens-4.json")]  # fmt: skip


def test_a_second_profile_in_a_session_is_kept_beside_the_first(tmp_path):
    res = _results(tmp_path)
    outs = []
    for name, rate in (("out1", "2.119"), ("out3", "1.463")):
        out = tmp_path / name
        out.mkdir()
        command = f"bench_cuda.py --out ~/{name} profile"
        (out / "profile.json").write_text(json.dumps({"step": "profile", "command": command}))
        (out / "profile_details.json").write_text(json.dumps({"rate": rate}))
        (out / "h200.yaml").write_text(PROFILE + f"read_gbps: {rate}\n")
        outs.append(out)
    merge_cuda.merge(outs, 38, "h100", res)
    first, second = (res / "h100-r38.yaml").read_text(), (res / "h100-r38-2.yaml").read_text()
    assert "name: h100-r38\n" in first and "read_gbps: 2.119" in first
    assert "name: h100-r38-2\n" in second and "read_gbps: 1.463" in second
    details = [json.loads((res / f"profile_details-r38{s}.json").read_text()) for s in ("", "-2")]
    assert details == [{"rate": "2.119"}, {"rate": "1.463"}]
    assert sorted(p.name for p in (res / "session38").iterdir()) == [
        "profile-2.json", "profile.json"
    ]  # fmt: skip
    before = {f: f.read_bytes() for f in res.rglob("*") if f.is_file()}
    lone = tmp_path / "lone"  # a profile's yaml without its step's JSON, where one is merged
    lone.mkdir()
    (lone / "profile_details.json").write_text("{}")
    (lone / "h200.yaml").write_text(PROFILE)
    with pytest.raises(merge_cuda.MergeError, match="already merged"):
        merge_cuda.merge([lone], 38, "h100", res)
    assert {f: f.read_bytes() for f in res.rglob("*") if f.is_file()} == before
