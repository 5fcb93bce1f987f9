"""specdec.bench.lockstep, `bench_cuda.py --lockstep` and `specdec bench speedup`, on the bundled
model on this CPU: the sides take turns a pass at a time (never more than a pass apart), every
side's tokens are plain greedy's, the analysis measures each speculative run against its own
pair's plain run, and the speedup bench reports each run and the break-even α, refusing bad
input in one line before it decodes.

Run: `pytest tests/bench/test_lockstep.py`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis import cuda
from analysis.speedup import speedup_table
from specdec.bench import lockstep as lockstep_module
from specdec.bench.lockstep import Side, lockstep, paired_runs
from specdec.bench.speedup import SpeedupConfig
from specdec.checkpoint.bundled import resolve_model
from specdec.core.errors import SpecdecError
from specdec.decode.loop import Decode, DecodeConfig
from specdec.decode.run import generate
from specdec.stream.loader import load
from specdec.trace.format import save_trace
from specdec.trace.synthetic import synthetic_trace
from tests.helpers import load_module

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cuda.py"
PROFILE = Path(__file__).resolve().parents[2] / "benchmarks/results/cuda/h100-r21.yaml"
TOKENS = 24


@pytest.fixture(scope="module")
def models():
    pair = [load(resolve_model("tiny"), budget="50%") for _ in "ab"]
    yield pair
    for sm in pair:
        sm.close()


def _turns(monkeypatch, models) -> list[tuple[int, int]]:
    """Filled as decodes run: (the side, 0 or 1 by `models`, tokens committed after its pass),
    a pass at a time, in the order they ran."""
    turns: list[tuple[int, int]] = []
    passes = Decode.passes

    def spied(run):
        for rec in passes(run):
            turns.append((0 if run.sm is models[0] else 1, run.n_generated))
            yield rec

    monkeypatch.setattr(Decode, "passes", spied)
    return turns


def test_sides_take_turns_a_pass_at_a_time_and_decode_as_plain_greedy(models, monkeypatch):
    a, b = models
    trace = synthetic_trace(256, n_layers=4, n_experts=32, top_k=4, seed=3)
    prompt = a.encode("The cache holds")
    plain = generate(a, prompt, "none", DecodeConfig(1, TOKENS), stop_at_eos=False, routing=trace)
    a.reset_cache()
    turns = _turns(monkeypatch, models)  # (side, tokens committed after its pass)
    sides = [
        Side(a, "none", DecodeConfig(1, TOKENS)),
        Side(b, "oracle:0.7", DecodeConfig(3, TOKENS)),
    ]
    got = lockstep(sides, prompt, routing=trace, reference=plain.tokens)
    assert [r.tokens for r in got] == [plain.tokens, plain.tokens]
    assert [sum(r.committed for r in res.records) for res in got] == [TOKENS - 1] * 2
    spec = got[1].records
    assert {r.gamma for r in spec} == {3} and 0 < sum(r.accepted for r in spec) < sum(
        r.drafted for r in spec
    )  # the oracle both kept and rejected drafts
    assert got[0].summary["routing"] == got[1].summary["routing"] == "trace:synthetic"
    done, went = [0, 0], None  # tokens committed a side; the side that went last
    for side, n in turns:  # each turn went to the side behind (level: the one that went last)
        level = done[side] == done[1 - side]
        behind = done[side] < done[1 - side] or (level and side == (0 if went is None else went))
        assert behind or done[1 - side] >= TOKENS, turns
        done[side], went = n, side
    switches = sum(x[0] != y[0] for x, y in zip(turns, turns[1:], strict=False))
    assert switches >= len(spec), turns  # interleaved, not one run after the other
    order = [side for side, _ in turns]
    for res, side in zip(got, (0, 1), strict=True):  # each record says which side ran before it
        ran = [i for i, s in enumerate(order) if s == side]
        assert [r.follows for r in res.records] == [i > 0 and order[i - 1] != side for i in ran]


def test_level_sides_lead_rounds_in_turn(models, monkeypatch):
    """Two plain sides are level after every round: the rounds run A B, B A, A B, ..., so each
    side runs right after the other's pass of the same token in half its passes."""
    turns = _turns(monkeypatch, models)
    got = lockstep([Side(sm, "none", DecodeConfig(1, 9)) for sm in models], models[0].encode("A"))
    order = [side for side, _ in turns]
    assert order == [0, 1, 1, 0] * 4  # 8 passes a side: the prefill commits the first token
    assert [[r.follows for r in res.records] for res in got] == [
        [False, True] * 4,
        [True, False] * 4,
    ]


def test_run_copy_names_the_copy_paired_runs_gave_the_run(models, monkeypatch):
    """analysis.cuda `run_copy` reads a pair's number as the copy its run decoded on (the
    `copies` table splits blocked time by it): the second-loaded copy in even pairs."""
    runs_on: list[int] = []
    real = lockstep_module.lockstep

    def spied(sides, *args, **kw):
        runs_on.append(0 if sides[1].sm is models[0] else 1)
        return real(sides, *args, **kw)

    monkeypatch.setattr(lockstep_module, "lockstep", spied)
    pairs = list(paired_runs(tuple(models), models[0].encode("A"), [("lookup", 2)] * 3, 6))
    assert runs_on == [cuda.run_copy({"lockstep": p.k}) for p in pairs] == [1, 0, 1]


def test_a_shared_model_or_a_budget_holding_every_expert_is_refused(models):
    a, _ = models
    prompt = a.encode("x")
    with pytest.raises(SpecdecError, match="two sides share a loaded model"):
        lockstep([Side(a, "none", DecodeConfig(1, 4))] * 2, prompt)
    full = load(resolve_model("tiny"), budget="100%")
    try:
        with pytest.raises(SpecdecError, match="side 1's budget holds every expert"):
            lockstep([Side(a, "none", DecodeConfig(1, 4)), Side(full, "none", DecodeConfig(1, 4))],
                     prompt)  # fmt: skip
    finally:
        full.close()


def test_warm_up_runs_every_shape_and_drafter_the_timed_runs_will(models, monkeypatch):
    """Each γ a run asks for (every γ auto may choose) with the oracle, then each other drafter
    once: a first call's one-off cost (MTP's layer among them) stays out of the timed runs."""
    from specdec.bench import lockstep as module

    a, _ = models
    ran: list[tuple[str, int]] = []
    real = module.generate

    def spied(sm, prompt, drafter, cfg, **kw):
        ran.append((str(drafter), cfg.gamma.fixed))
        return real(sm, prompt, drafter, cfg, **kw)

    monkeypatch.setattr(module, "generate", spied)
    runs = [("oracle:0.9", 3), ("self", 4), ("mtp", "auto"), ("lookup", 2), ("self", 2)]
    module.warm_up(a, a.encode("The cache holds"), runs, None)
    assert ran == [("none", 1), *(("oracle:0.5", g) for g in range(2, 9)),
                   ("lookup", 2), ("mtp", 2), ("self", 4)]  # fmt: skip
    assert a.streamer.cache.resident_keys() == []  # reset after


def test_bench_cuda_in_lockstep_pairs_each_run_with_its_own_plain_run(tmp_path, monkeypatch):
    """`--lockstep spec auto` and plain `spec` in one session, merged as a lent machine's output
    is: each lockstep run against its pair's plain run alone, the others between plain runs, and
    each kind's break-even apart."""
    disk, results = _bench_disk(tmp_path), tmp_path / "results"
    grid = ["--tokens", "16", "--spec-budgets", "50%", "--alphas", "1.0,0.6", "--gammas", "2,3",
            "--auto-alphas", "0.9", "--auto-gammas", "1,2"]  # fmt: skip
    for out, steps in (("paired", ["--lockstep", "spec", "auto"]), ("between", ["spec"])):
        cmd = [sys.executable, str(BENCH), "--disk", str(disk), "--out", str(tmp_path / out),
               "--session", "99", "--profile", str(PROFILE), *grid, *steps]  # fmt: skip
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert got.returncode == 0, got.stderr[-2000:]
    rows = json.loads((tmp_path / "paired" / "spec.json").read_text())["runs"]
    assert [(r["drafter"], r["gamma"], r["lockstep"]) for r in rows] == [
        (d, g, k)
        for k, (drafter, gamma) in enumerate(
            [("oracle:1", "2"), ("oracle:1", "3"), ("oracle:0.6", "2"), ("oracle:0.6", "3")]
        )
        for d, g in (("none", "1"), (drafter, gamma))
    ]
    auto = json.loads((tmp_path / "paired" / "auto.json").read_text())["runs"]
    assert [(r["drafter"], r["gamma"]) for r in auto] == [
        ("none", "1"), ("oracle:0.9", "auto"), ("none", "1"), ("oracle:0.9", "1"),
        ("none", "1"), ("oracle:0.9", "2"),
    ]  # fmt: skip
    assert len({tuple(r["tokens"]) for r in rows + auto}) == 1  # plain greedy's, every run

    results.mkdir()
    shutil.copy(PROFILE, results / PROFILE.name)
    for step in ("spec", "drafters", "auto"):
        (results / f"{step}.json").write_text('{"runs": []}')
        (results / f"{step}.jsonl").write_text("")
    merge = load_module(BENCH.parent / "merge_cuda.py").merge
    merge([tmp_path / "paired", tmp_path / "between"], 99, "h100", results)
    monkeypatch.setattr(cuda, "RESULTS", results)
    monkeypatch.setattr(cuda, "SESSIONS", {99: (PROFILE.stem,)})
    cuda.runs.cache_clear()
    try:
        kept, paired = cuda.runs("spec"), cuda.spec_rows(("spec",))
        lockstep = [r for r in paired if "lockstep" in r]
        assert [(r["lockstep"], r["grid"]) for r in lockstep] == [(k, 1) for k in range(4)]
        for k, r in enumerate(lockstep):  # its own pair's plain run, and no other
            assert r["plain"] is kept[2 * k] and r["plains"] == [kept[2 * k]]
        between = [r for r in paired if "lockstep" not in r]  # plain, γ 2, γ 3, plain, ...
        assert [len(r["plains"]) for r in between] == [2] * 4
        assert between[0]["plains"] == [kept[8], kept[11]]
        lines = cuda.break_even_text(cuda.profiles(), (99,)).splitlines()
        assert [line.split(":")[0] for line in lines] == [
            f"- session 99{how}, 50%, γ = {g}" for how in ("", " (lockstep grid 1)") for g in (2, 3)
        ] + ["- session 99 (lockstep grid 2), 50%, γ = 2"]  # the auto step's γ = 2 beside auto
        # (its γ = 1, the control with the speculative path and no draft, has no line)
        # the auto step's pairs are a grid of their own (not the spec grid's at α 1 and 0.6),
        # and auto, one α, has no break-even line
        auto_rows = [r for r in cuda.spec_rows() if r["step"] == "auto" and "lockstep" in r]
        assert [(r["gamma"], r["grid"]) for r in auto_rows] == [("auto", 2), ("1", 2), ("2", 2)]
        # auto split where it first drafted: the parts cover its tokens, each beside its pair's
        # plain passes over the same tokens; the part before has no draft, the one from it opens
        # with one
        parts = cuda.auto_phases(auto_rows[0])
        n = auto_rows[0]["committed"]  # the tokens its passes committed
        assert [t for tokens, _, _ in parts for t in tokens] == list(range(1, n + 1))
        for tokens, mine, theirs in parts:
            assert sum(r.committed for r in mine) == len(tokens) == len(theirs)
        opens = [bool(mine[0].drafted) for _, mine, _ in parts]
        assert opens in ([False], [True], [False, True])
        assert opens[0] or not any(r.drafted for r in parts[0][1])
        # one line a part, and the γ = 1 control's (it never drafts: one part)
        table = cuda.auto_phases_table()
        assert table.count("\n| 99 | 50% | oracle:0.9 | auto |") == len(parts)
        assert table.count("\n| 99 | 50% | oracle:0.9 | 1 | 1-") == 1
        # by copy: the control (pair 1, the run on the first copy) reads as plain does; the
        # fixed γ = 2 drafts, so it is not there
        table = cuda.copies_table()
        assert "\n| 99 | 50% | 1 | 1 | first | 1-" in table and "| 99 | 50% | 2 |" not in table
        table = cuda.lockstep_table()
        assert "- session 99 grid 2, 50%, γ = 2: break-even α measured" in table
        assert "γ = auto: break-even" not in table
    finally:
        cuda.runs.cache_clear()


def test_bench_cuda_copies_reads_the_same_blocks_into_each_copy_in_turn(tmp_path, monkeypatch):
    """The `copies` step on the bundled model's pack: every round reads into both loaded
    copies with each staging, the copy first and the staging first alternating, each call timed
    and its thread-time split; the ratios are those of the rounds' cells."""
    disk, out = _bench_disk(tmp_path), tmp_path / "out"
    cmd = [sys.executable, str(BENCH), "--disk", str(disk), "--out", str(out), "--session", "99",
           "--spec-budgets", "50%", "copies"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    data = json.loads((out / "copies.json").read_text())
    assert data["batch"] == 2 and data["blocks"] == 160  # the bundled pack's every block
    rounds = data["rounds"]
    kinds = ["2MiB", "4KiB"]
    assert [(x["round"], x["copy"], x["staging"]) for x in rounds] == [
        (r, c, k)
        for r in range(8)
        for c in ((0, 1) if r % 2 == 0 else (1, 0))
        for k in (kinds if r // 2 % 2 == 0 else kinds[::-1])
    ]
    assert all(x["ms_a_call"] > 0 and x["io_s_ms_a_call"] > 0 for x in rounds)
    ms = {(x["round"], x["copy"], x["staging"]): x["ms_a_call"] for x in rounds}
    for k in kinds:
        assert data["second_over_first"][k]["each"] == pytest.approx(
            [ms[r, 1, k] / ms[r, 0, k] for r in range(8)]
        )
    for c in (0, 1):
        assert data["4KiB_over_2MiB"][str(c)]["each"] == pytest.approx(
            [ms[r, c, "4KiB"] / ms[r, c, "2MiB"] for r in range(8)]
        )
    # the bundled pack's blocks are below 2 MiB: no staging asks for huge pages
    assert data["staging_huge_pages"] == [None, None]
    # its table: a row per staging and copy, the second's with that staging's median ratio
    (tmp_path / "results" / "session99").mkdir(parents=True)
    (out / "copies.json").rename(tmp_path / "results" / "session99" / "copies.json")
    monkeypatch.setattr(cuda, "RESULTS", tmp_path / "results")
    rows = [line.split(" | ") for line in cuda.copies_bench_table().splitlines()[2:]]
    assert [(r[5], r[6]) for r in rows] == [(k, c) for k in kinds for c in ("first", "second")]
    assert [r[13].rstrip(" |") for r in rows] == [
        x for k in kinds for x in ("", f"{data['second_over_first'][k]['median']:.3f}")
    ]


def test_bench_cuda_keeps_a_lockstep_step_cut_short_and_the_oracles_reference(
    tmp_path, monkeypatch, capsys
):
    """A lockstep step that fails after its first pair keeps that pair's runs with the error,
    and merge_cuda takes them (a lease or a pipeline's limit ends steps mid-way); the oracle's
    reference, kept in --disk, serves the next command instead of another untimed plain run."""
    from specdec.bench import lockstep as module

    disk, results = _bench_disk(tmp_path), tmp_path / "results"
    real, references = module.paired_runs, []
    monkeypatch.setattr(module, "paired_reference", _counted(module.paired_reference, references))

    def first_pair_then_fails(*args, **kw):
        yield next(real(*args, **kw))
        raise RuntimeError("the lease ended")

    bench = load_module(BENCH)
    for out, runs in (("cut", first_pair_then_fails), ("again", real)):
        monkeypatch.setattr(module, "paired_runs", runs)
        monkeypatch.setattr(sys, "argv", [
            str(BENCH), "--disk", str(disk), "--out", str(tmp_path / out), "--session", "98",
            "--profile", str(PROFILE), "--tokens", "8", "--spec-budgets", "50%", "--alphas",
            "1.0", "--gammas", "2,3", "--lockstep", "spec",
        ])  # fmt: skip
        assert bench.main() == 0
    cut = json.loads((tmp_path / "cut" / "spec.json").read_text())
    assert "the lease ended" in cut["error"]
    assert [(r["drafter"], r["gamma"]) for r in cut["runs"]] == [("none", "1"), ("oracle:1", "2")]
    assert len((tmp_path / "cut" / "spec.jsonl").read_text().splitlines()) == 2
    assert len(references) == 1  # the second command took the kept one
    assert "the oracle's reference: reference-" in capsys.readouterr().out
    again = json.loads((tmp_path / "again" / "spec.json").read_text())
    assert "partial" not in again and len(again["runs"]) == 4
    assert len({tuple(r["tokens"]) for r in cut["runs"] + again["runs"]}) == 1

    results.mkdir()
    (results / "spec.json").write_text('{"runs": []}')
    (results / "spec.jsonl").write_text("")
    load_module(BENCH.parent / "merge_cuda.py").merge([tmp_path / "cut"], 98, "h100", results)
    merged = json.loads((results / "spec.json").read_text())
    assert len(merged["runs"]) == 2 and "the lease ended" in merged["sessions"]["98"][0]["error"]


def _bench_disk(tmp_path: Path) -> Path:
    """bench_cuda's --disk as its `big` step leaves it, at the bundled model's size: the pack
    (mm16.packed) and a trace of its shape (minimax.trace)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    pack = [sys.executable, "-m", "specdec", "pack", str(resolve_model("tiny")),
            str(disk / "mm16.packed")]  # fmt: skip
    subprocess.run(pack, check=True, capture_output=True, timeout=120)
    save_trace(synthetic_trace(256, n_layers=4, n_experts=32, top_k=4), disk / "minimax.trace")
    return disk


def _counted(f, calls: list):
    def counted(*args, **kw):
        calls.append(args)
        return f(*args, **kw)

    return counted


def test_bench_speedup_measures_each_run_beside_plain_and_the_break_even(tmp_path):
    out = tmp_path / "speedup.json"
    cmd = [sys.executable, "-m", "specdec", "bench", "speedup", "--model", "tiny", "--budget",
           "25%", "--tokens", "16", "--drafters", "oracle:1,oracle:0.5", "--gammas", "2,auto",
           "--profile", "m4-24gb", "--out", str(out), "--json"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    result = json.loads(got.stdout)
    kept = json.loads(out.read_text())  # what was printed, this machine's paths left out
    assert (kept["rows"], kept["break_even"]) == (result["rows"], result["break_even"])
    assert str(Path.home()) not in out.read_text()
    rows = result["rows"]
    assert [(r["drafter"], r["gamma"]) for r in rows] == [
        ("oracle:1", 2), ("oracle:1", "auto"), ("oracle:0.5", 2), ("oracle:0.5", "auto")
    ]  # fmt: skip
    for r in rows:
        assert r["tokens_equal"] and r["speedup"] == pytest.approx(
            r["tokens_per_s"] / r["plain_tokens_per_s"]
        )
        assert r["modeled_speedup/m4-24gb"] > 0 and r["plain_read_gbps"] > 0
    assert rows[0]["acceptance"] == 1.0 and rows[2]["acceptance"] < 1.0
    assert set(result["break_even"]) == {"2", "auto"}
    be = result["break_even"]["2"]
    assert be["alphas"] == [0.5, 1.0] and {"speedup", "modeled_speedup/m4-24gb"} < set(be)
    assert result["config"]["budget"] == "25%" and result["seed"] == 0
    assert not result["ran"]["holds_all_experts"] and "packages" in result["machine"]
    table = speedup_table(out).splitlines()  # the docs' table of such a file
    assert len([line for line in table if line.startswith("| oracle:")]) == 4
    assert [line.split(" (")[0] for line in table if line.startswith("- ")] == [
        "- break-even α, γ = 2", "- break-even α, γ = auto"
    ]  # fmt: skip


def test_bench_speedup_between_plain_runs_on_one_model(tmp_path):
    """`--pairing between`: one loaded model, each run between two plain runs and measured
    against their mean time per token, neighbours sharing the run between them; a budget that
    holds every expert (which lockstep refuses) is timed too."""
    cmd = [sys.executable, "-m", "specdec", "bench", "speedup", "--model", "tiny", "--budget",
           "100%", "--tokens", "12", "--drafters", "oracle:1,oracle:0.5", "--gammas", "2",
           "--pairing", "between", "--json"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    result = json.loads(got.stdout)
    assert result["config"]["pairing"] == "between" and result["ran"]["holds_all_experts"]
    rows = result["rows"]
    assert [r["drafter"] for r in rows] == ["oracle:1", "oracle:0.5"]
    assert rows[0]["plain_runs_tokens_per_s"][1] == rows[1]["plain_runs_tokens_per_s"][0]
    for r in rows:
        either = r["plain_runs_tokens_per_s"]
        assert r["plain_tokens_per_s"] == pytest.approx(2 / (1 / either[0] + 1 / either[1]))
        assert r["speedup"] == pytest.approx(r["tokens_per_s"] / r["plain_tokens_per_s"])
        assert r["tokens_equal"]
    assert set(result["break_even"]) == {"2"}
    with pytest.raises(SpecdecError, match="--pairing sideways"):  # the library's own check
        SpeedupConfig("tiny", "25%", ("oracle:1",), (2,), pairing="sideways").check()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--budget", "100%"], "holds every expert"),
        (["--gammas", "1"], "γ 1: give γ >= 2 or auto"),
        (["--drafters", "none"], "drafter none drafts nothing"),
        (["--tokens", "1"], "--tokens 1: give at least 2"),
        (["--drafters", "oracle:2"], "oracle"),
        (["--pairing", "sideways"], "invalid choice"),
    ],
)
def test_bench_speedup_refuses_bad_input_in_one_line(tmp_path, argv, says):
    cmd = [sys.executable, "-m", "specdec", "bench", "speedup", "--model", "tiny", "--tokens",
           "8", "--out", str(tmp_path / "r.json"), *argv]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode != 0 and "Traceback" not in got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], got.stderr
    assert not (tmp_path / "r.json").exists()  # nothing written


def test_bench_speedup_refuses_an_existing_output_before_decoding(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("kept")
    cmd = [sys.executable, "-m", "specdec", "bench", "speedup", "--out", str(out)]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and "exists; choose another output path" in got.stderr
    assert out.read_text() == "kept"


def test_auto_phases_split_a_run_where_it_first_drafted():
    """Auto's passes before its first draft against plain's over the same tokens, then the rest:
    a pass of 3 tokens on auto's side stands beside 3 of plain's one-token passes."""

    def passes(*committed: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(committed=c, drafted=c - 1) for c in committed]

    plain = {"records": passes(*[1] * 7)}
    row = {"records": passes(1, 1, 3, 1, 1), "committed": 7, "plain": plain}
    parts = cuda.auto_phases(row)
    assert [(list(t), len(mine), theirs) for t, mine, theirs in parts] == [
        ([1, 2], 2, plain["records"][:2]),
        ([3, 4, 5, 6, 7], 3, plain["records"][2:]),
    ]
    # never drafted: one part; drafted from its first pass: one part, from token 1
    for first in (1, 7):
        row = {"records": passes(first, *[1] * (7 - first)), "committed": 7, "plain": plain}
        assert [(list(t), len(theirs)) for t, _, theirs in cuda.auto_phases(row)] == [
            (list(range(1, 8)), 7)
        ], first


def test_copies_compare_the_same_reads_by_the_copy_each_side_ran_on():
    """`copies` orients a pair by loaded copy, not by side, over the passes both sides read
    alike (auto before its first draft, the γ = 1 control), and leaves out a run that drafted
    from its first pass and a fixed γ that drafts."""

    def passes(blocked: float, n: int = 4, drafted: int = 0) -> list[SimpleNamespace]:
        steps = {"verify": [[0, 8, 2, 0, 0, 0], [1, 8, 0, 0, 0, 0]]}  # one read call a pass
        return [SimpleNamespace(committed=1 + drafted, drafted=drafted, blocked_s=blocked,
                                reads=2, steps=steps, read_split={}, wall_s=blocked,
                                books_s=0.0, choose_s=0.0, follows=None) for _ in range(n)]  # fmt: skip

    def row(k: int, gamma: str, run: float, plain: float, drafted: int = 0) -> dict:
        recs = passes(run, drafted=drafted)
        return {"session": 9, "budget": "9GB", "gamma": gamma, "drafter": "oracle:1",
                "lockstep": k, "records": recs, "committed": len(recs) * (1 + drafted),
                "plain": {"records": passes(plain, len(recs) * (1 + drafted))}}  # fmt: skip

    rows = [row(0, "auto", 0.011, 0.010), row(1, "1", 0.010, 0.011),
            row(2, "auto", 0.02, 0.01, drafted=1), row(3, "4", 0.02, 0.01, drafted=3)]  # fmt: skip
    lines = cuda.copies_table(rows).splitlines()[2:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    # the second copy read 11 ms a call in both pairs: the run's side in pair 0, plain's in 1
    assert [(c[3], c[4], c[6], c[7]) for c in cells] == [
        ("0", "second", "10.00 / 11.00", "1.100"),
        ("1", "first", "10.00 / 11.00", "1.100"),
    ]


def test_auto_plain_by_its_choice_reads_as_plain_greedy_does(monkeypatch):
    """Until it first drafts, `--gamma auto` (the speculative path, a verify of one position,
    its routing tapped) issues the same read calls as plain greedy beside it in lockstep: the
    same batches of blocks in the same order (the thirty-fifth CUDA session found auto's side
    blocked 1.11x longer a read on the same blocks; the calls are not what differs)."""
    from specdec.bench.lockstep import prepare, two_models
    from specdec.decode.loop import DecodeConfig
    from specdec.store.reader import ExpertReader

    calls: dict[int, list[list[tuple[int, int]]]] = {}
    real = ExpertReader.read

    def read(self, requests):
        calls.setdefault(id(self), []).append([(layer, expert) for layer, expert, _ in requests])
        return real(self, requests)

    tokens = 48
    with two_models("tiny", "10%") as (a, b):
        prompt = a.encode("def fibonacci(n):")
        runs = [("oracle:1", "auto")]
        reference = prepare((a, b), prompt, runs, tokens, None)
        for sm in (a, b):
            sm.reset_cache()
        monkeypatch.setattr(ExpertReader, "read", read)
        sides = [Side(a, "none", DecodeConfig(1, tokens)),
                 Side(b, "oracle:1", DecodeConfig("auto", tokens))]  # fmt: skip
        plain, auto = lockstep(sides, prompt, reference=reference)
        readers = [sm.streamer.source.reader for sm in (a, b)]
    assert not any(r.drafted for r in auto.records), "auto stays plain over 48 tokens at 10%"
    assert plain.tokens == auto.tokens
    mine, theirs = (calls[id(r)] for r in readers)
    assert mine == theirs and sum(map(len, mine)) > 50  # reads enough to mean something
