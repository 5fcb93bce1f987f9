"""Tests of trace recording and the probes, where the answer is known.

    pytest tests/probes/test_probes.py

Recording runs real random-weight checkpoints of mlx-lm families (tests/helpers.py); the
eviction and basis checks use synthetic data whose answer follows from the construction.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specdec.cli import main as cli_main
from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.trace.format import load_trace, save_trace
from specdec.trace.prompts import load_prompts
from tests.helpers import load_module, random_checkpoint

PROMPTS = 3
TOKENS = 6
HALF = Budget.parse("50%")


@pytest.fixture(scope="module")
def ds3(tmp_path_factory):
    from specdec.probes.record import record
    from specdec.stream.loader import load

    ckpt = random_checkpoint(tmp_path_factory.mktemp("ckpt"), "deepseek_v3", None)
    sm = load(ckpt, budget="100%", with_mtp=False)
    rec = record(
        str(ckpt), "heldout", TOKENS, limit=PROMPTS, distances=(0, 1, 2), keep_inputs=True, sm=sm
    )
    return ckpt, sm, rec


def test_record_round_trips_and_matches_the_model_routing(ds3, tmp_path):
    from specdec.decode.trace_union import record_decode_routing

    _, sm, rec = ds3
    t = rec.trace
    save_trace(t, tmp_path / "tr")
    back = load_trace(tmp_path / "tr")
    for name in ("experts", "gates", "tokens", "prompt_ids", "phase", "lookahead"):
        np.testing.assert_array_equal(getattr(back, name), getattr(t, name))
    assert back.layer_ids == t.layer_ids and back.lookahead_distances == [0, 1, 2]
    assert set(np.unique(t.prompt_ids)) == set(range(PROMPTS))
    # the decode positions of prompt 0 route as an independent recorder saw them
    prompt = t.tokens[(t.prompt_ids == 0) & (t.phase == 0)].tolist()
    mine = t.experts[(t.prompt_ids == 0) & (t.phase == 1)]  # [D, L, k]
    theirs = record_decode_routing(sm, prompt, TOKENS)
    for j, lid in enumerate(t.layer_ids):
        np.testing.assert_array_equal(mine[:, j], np.sort(theirs[lid][: len(mine)], axis=-1))


def test_record_stops_at_an_eos_and_keeps_the_positions_before_it(ds3, monkeypatch):
    """An EOS mid-decode ends that prompt's trace where the decode stopped, even when plain
    greedy decoding computed one forward past the EOS (every layer resident: pipelined) whose
    cache steps never ran; the rows kept are the rows of the recording without an EOS."""
    from specdec.probes.record import record_trace
    from specdec.stream.loader import load

    ckpt, _, rec = ds3
    t = rec.trace
    sm = load(ckpt, budget="100%", warm=True, with_mtp=False)  # every expert read at load
    assert sm.streamer.all_resident(sm.main_moe_layers)  # the pipelined path is the one taken
    prompts = [t.tokens[(t.prompt_ids == p) & (t.phase == 0)].tolist() for p in range(PROMPTS)]
    fed = [t.tokens[(t.prompt_ids == p) & (t.phase == 1)].tolist() for p in range(PROMPTS)]
    eos = fed[-1][2]  # the last prompt's third decoded token: its decode stops there
    monkeypatch.setattr(sm.tokenizer, "eos_token_ids", {eos})
    got = record_trace(sm, prompts, TOKENS, (0, 1, 2)).trace
    keep = np.concatenate(
        [
            np.flatnonzero(t.prompt_ids == p)[: len(prompts[p]) + (fed[p] + [eos]).index(eos)]
            for p in range(PROMPTS)
        ]
    )  # each prompt's prefill, then its decode positions up to the first EOS produced
    assert len(keep) < len(t.phase)
    for name in ("experts", "gates", "tokens", "prompt_ids", "phase"):
        np.testing.assert_array_equal(getattr(got, name), getattr(t, name)[keep])
    np.testing.assert_array_equal(got.lookahead, t.lookahead[:, keep])


def test_lookahead_recall_is_one_at_distance_zero(ds3):
    from specdec.probes.lookahead import lookahead_table

    rows = {r["d"]: r for r in lookahead_table(ds3[2].trace)}
    assert rows[0]["recall_all"] == 1.0 and rows[0]["recall_decode"] == 1.0
    assert 0.0 <= rows[1]["recall_all"] < 1.0  # random routers: layer L-1's input is not L's
    assert rows[None]["cells_all"] > 0


def test_lookahead_prefetch_replay_without_lookahead_is_the_eviction_lru(ds3):
    from specdec.probes.eviction import eviction_table
    from specdec.probes.lookahead import lookahead_table

    trace = ds3[2].trace
    pre = [r for r in lookahead_table(trace, [HALF]) if r["kind"] == "prefetch"]
    assert [r["d"] for r in pre] == [0, 1]  # d = 2 would reach past the 2 MoE layers
    lru = next(r for r in eviction_table(trace, trace, [HALF]) if r["policy"] == "lru")
    assert pre[0]["hit_rate"] == pytest.approx(lru["hit_rate"])
    assert pre[0]["prefetch_bytes_per_token"] == 0 < pre[1]["prefetch_bytes_per_token"]


def test_eviction_position_sets(ds3):
    from specdec.probes.eviction import eviction_table

    t = ds3[2].trace
    for kind, n in (
        ("decode", t.phase.sum()),
        ("prefill", (t.phase == 0).sum()),
        ("all", len(t.phase)),
    ):
        rows = eviction_table(t, t, [HALF], positions=kind, policies=["lru"])
        assert rows[0]["positions"] == n and rows[0]["positions_kind"] == kind
    with pytest.raises(SpecdecError):
        eviction_table(t, t, [HALF], positions="odd")


def test_gates_drop_nothing_is_exact_and_residency_matches_the_simulator(ds3):
    from specdec.probes.eviction import select_positions
    from specdec.probes.gates import gates_table
    from specdec.sim.simulate import simulate

    _, sm, rec = ds3
    rows = gates_table(sm, rec, budgets=[HALF])
    drops = {r["variant"]: r for r in rows if r["kind"] == "drop"}
    assert drops["all k experts (check: 0)"]["rel_error_mean"] < 1e-4
    assert drops["drop the lowest-gate expert"]["rel_error_mean"] > 1e-3
    res = next(r for r in drops.values() if r["budget_slots"])
    dec = select_positions(rec.trace, rec.trace.phase == 1)
    lru = simulate(dec, ["lru"], [Budget(slots=res["budget_slots"])])[0]
    assert res["hit_rate"] == pytest.approx(lru.hit_rate)
    slots = [r for r in rows if r["kind"] == "slot"]
    assert [r["slot"] for r in slots] == [1, 2, 3, 4]
    assert all(a["mean_gate"] >= b["mean_gate"] for a, b in zip(slots, slots[1:], strict=False))


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_gates_of_normalised_families_sum_to_one(family, tmp_path):
    from specdec.probes.gates import gate_mass
    from specdec.probes.record import record

    ckpt = random_checkpoint(tmp_path, family, None)
    trace = record(str(ckpt), "heldout", 3, limit=2, distances=()).trace
    np.testing.assert_allclose(trace.gates.sum(-1), 1.0, atol=1e-5)
    assert sum(r["mean_gate"] for r in gate_mass(trace)) == pytest.approx(1.0, abs=1e-5)


def test_eviction_bounds_hold():
    from specdec.probes.eviction import eviction_table
    from specdec.trace.synthetic import synthetic_trace

    ev = synthetic_trace(300, n_layers=4, n_experts=32, top_k=4, seed=1)
    prof = synthetic_trace(300, n_layers=4, n_experts=32, top_k=4, seed=2)
    rows = eviction_table(ev, prof, [Budget.parse(b) for b in ("10%", "25%", "50%")])
    by = {(r["policy"], r["budget_slots"]): r["hit_rate"] for r in rows}
    for n in {r["budget_slots"] for r in rows}:
        for p in ("lru", "slru", "lfu", "hotness", "static"):
            assert by[("belady", n)] >= by[(p, n)] - 1e-12, (p, n)
        assert by[("knapsack_bound", n)] >= by[("static", n)] - 1e-12


def test_repeated_ngrams_counts_a_greedy_loop():
    from specdec.probes.eviction import repeated_ngrams
    from specdec.trace.synthetic import synthetic_trace

    t = synthetic_trace(12, n_layers=1, n_experts=8, top_k=2)
    t.tokens = np.array([9, 9, 9, 9, 1, 2, 3, 1, 2, 3, 1, 2])  # 4 prompt tokens, then a loop
    t.phase = (np.arange(12) >= 4).astype(np.int8)
    t.prompt_ids = np.zeros(12, dtype=np.int32)
    # decoded 4-grams end at positions 4..11: 8 of them; (1,2,3,1) first at 7 and (2,3,1,2) at
    # 8, (3,1,2,3) at 9; repeats: (1,2,3,1) at 10 and (2,3,1,2) at 11
    assert repeated_ngrams(t) == pytest.approx(2 / 8)


def test_basis_of_shared_and_of_random_experts():
    from specdec.probes.basis import basis_stats

    rng = np.random.default_rng(0)
    E, d = 16, 4096
    shared = basis_stats(rng.normal(size=d) + 0.05 * rng.normal(size=(E, d)))
    assert shared["mean_cosine"] > 0.99 and shared["residual_norm_share"] < 0.06
    assert shared["rank_50"] == shared["rank_83"] == shared["rank_95"] == 1
    rand = basis_stats(rng.normal(size=(E, d)))
    assert abs(rand["mean_cosine"]) < 0.03
    assert rand["residual_norm_share"] == pytest.approx(np.sqrt(1 - 1 / E), abs=0.01)
    assert rand["rank_95"] >= E - 1


def test_read_path_shares_use_fio_at_the_same_threads():
    from specdec.probes.read_path import read_path_table

    bench = {
        "block_bytes": 1 << 20,
        "paths": [
            {"name": "preadv_direct_arena", "gbps": 1.5, "page_cache": False, "threads": 1},
            {"name": "pread_heap_mxarray", "gbps": 2.4, "page_cache": True, "threads": 8},
        ],
        "fio": [
            {"engine": "psync", "threads": 1, "gbps": 2.0},
            {"engine": "libaio", "threads": 1, "gbps": 1.0},
            {"engine": "psync", "threads": 8, "gbps": 3.0},
        ],
    }
    rows = [r for r in read_path_table(bench) if not r["path"].startswith("fio_")]
    assert [r["share_of_device"] for r in rows] == [pytest.approx(0.75), pytest.approx(0.8)]
    assert read_path_table({**bench, "fio": None})[0]["share_of_device"] is None


def test_prompt_errors_are_one_line(tmp_path, monkeypatch):
    assert len(load_prompts("heldout")) == 40 and not set(load_prompts("heldout")) & set(
        load_prompts("profile")
    )
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"question": "x"}\n')
    for spec in (str(tmp_path / "missing.jsonl"), str(bad)):
        with pytest.raises(SpecdecError) as e:
            load_prompts(spec)
        assert "\n" not in str(e.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(SpecdecError) as e:
        load_prompts("dataset:specdec-no-such-org/no-such-dataset")
    assert "\n" not in str(e.value) and "could not be loaded" in str(e.value)


def test_prompts_from_a_saved_dataset(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"n": [1, 2, 3], "code": ["a = 1", "b = 2", "c = 3"]}).save_to_disk(
        tmp_path / "ds"
    )
    assert load_prompts(f"dataset:{tmp_path / 'ds'}", limit=2) == ["a = 1", "b = 2"]


def test_cli_probe_lookahead_from_a_trace(ds3, tmp_path):
    save_trace(ds3[2].trace, tmp_path / "tr")
    probe = ["probe", "lookahead", "--trace", str(tmp_path / "tr"), "--out", str(tmp_path)]
    assert cli_main(probe) == 0
    rows = json.loads((tmp_path / "lookahead.json").read_text())
    assert rows[0]["recall_all"] == 1.0
    assert (tmp_path / "lookahead.png").stat().st_size > 0
    assert "recall" in (tmp_path / "lookahead.md").read_text()


def test_cli_trace_record_writes_a_trace_and_errors_in_one_line(ds3, tmp_path, capsys):
    out = tmp_path / "rec"
    args = ["trace", "record", str(ds3[0]), "--limit", "1", "--max-tokens", "2", "--out", str(out)]
    assert cli_main(args) == 0
    t = load_trace(out)
    assert t.phase.sum() == 1 and t.lookahead_distances == [1, 2, 3]
    assert cli_main(args) == 2  # the directory exists: no overwrite without --overwrite
    bad = [
        "trace",
        "record",
        "tiny",
        "--prompts",
        str(tmp_path / "no.txt"),
        "--out",
        str(tmp_path / "x"),
    ]
    assert cli_main(bad) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "cannot read prompts" in err
    assert all(line.startswith("specdec: error:") for line in err.strip().splitlines())


def test_trace_stats_of_a_recorded_trace_keep_to_each_prompts_decode_positions(ds3):
    from specdec.sim.stats import trace_stats

    t = ds3[2].trace
    s = trace_stats(t, f"{t.n_layers * t.top_k}slots", gammas=(2,), phase="decode")
    shared, unions = [], []
    for pid in range(PROMPTS):
        e = t.experts[(t.prompt_ids == pid) & (t.phase == 1)]  # [D, L, k] one prompt's decode
        shared += [
            len(set(e[i, j]) & set(e[i - 1, j]))
            for i in range(1, len(e))
            for j in range(t.n_layers)
        ]
        unions += [
            len(set(e[i, j]) | set(e[i + 1, j]))
            for i in range(0, len(e) - 1, 2)
            for j in range(t.n_layers)
        ]
    assert s["overlap"] == pytest.approx(np.mean(shared) / t.top_k)
    assert s["union"]["2"] == pytest.approx(np.mean(unions))
    assert 0 <= s["static"] <= 1 and 0 <= s["lru"] <= 1


THROWAWAY = """
from dataclasses import dataclass, field

import matplotlib.pyplot as plt

from specdec.core.errors import SpecdecError
from specdec.probes.registry import Probe, ProbeOptions, ProbeOutput, register
from specdec.probes.report import md_table, write_report


@dataclass
class Options(ProbeOptions):
    greeting: str = field(default="hello", metadata={"help": "what the rows say"})


@register
class Throwaway(Probe):
    name = "throwaway"
    options = ("budgets", "policy", "greeting")
    Options = Options
    headline_name = "n_budgets"

    @classmethod
    def headline(cls, rows):
        return float(len(rows))

    @classmethod
    def run(cls, opts, ctx):
        if opts.greeting == "fail":
            raise SpecdecError("throwaway: asked to fail")
        rows = [{"budget": str(b), "policy": str(opts.policy), "says": opts.greeting} for b in opts.budgets]
        md = md_table(["budget", "says"], [[r["budget"], r["says"]] for r in rows])
        fig, ax = plt.subplots()
        return ProbeOutput(rows, write_report(opts.out, cls.name, rows, md, fig))
"""


@pytest.fixture
def throwaway(tmp_path):
    """Registers the probe of a module file written under tmp_path for one test, on demand."""
    from specdec.probes import PROBES

    path = tmp_path / "throwaway_probe.py"
    path.write_text(THROWAWAY)
    try:
        yield lambda: load_module(path)
    finally:
        PROBES.pop("throwaway", None)


def _help(capsys) -> str:
    assert cli_main(["probe", "--help"]) == 0
    return capsys.readouterr().out


def test_the_builtin_probes_in_their_order(capsys):
    from specdec.probes import probe_names

    assert probe_names() == ("gates", "eviction", "lookahead", "basis", "read_path")
    assert "{gates,eviction,lookahead,basis,read_path,all}" in _help(capsys)


def test_a_probe_from_a_new_module_is_found_by_name(throwaway, tmp_path, capsys):
    from specdec.probes import ProbeOptions, probe_names, run_probe

    out = tmp_path / "out"
    argv = ["probe", "throwaway", "--out", str(out), "--budgets", "5%,96slots", "--policy", "slru"]
    # not registered yet: the command line does not know the name (the check can fail)
    assert "throwaway" not in _help(capsys)
    assert cli_main(argv) == 2
    assert "invalid choice: 'throwaway'" in capsys.readouterr().err
    with pytest.raises(SpecdecError, match="unknown probe 'throwaway': use one of gates, "):
        run_probe("throwaway", ProbeOptions())

    throwaway()
    assert probe_names()[-1] == "throwaway"  # after the built-in ones (listed = 100)
    text = _help(capsys)
    assert "{gates,eviction,lookahead,basis,read_path,throwaway,all}" in text
    assert "--greeting GREETING   throwaway: what the rows say" in text

    assert cli_main([*argv, "--greeting", "hi"]) == 0
    rows = json.loads((out / "throwaway.json").read_text())
    assert rows == [
        {"budget": "5%", "policy": "slru", "says": "hi"},
        {"budget": "96slots", "policy": "slru", "says": "hi"},
    ]
    assert "| 96slots | hi |" in capsys.readouterr().out  # its table, printed
    assert (out / "throwaway.png").stat().st_size > 0
    assert cli_main([*argv, "--greeting", "fail"]) == 2
    assert capsys.readouterr().err == "specdec: error: throwaway: asked to fail\n"
    assert cli_main([*argv[:-4], "--budgets", "5"]) == 2
    assert "write 5% for shares" in capsys.readouterr().err


def test_a_registered_probe_is_an_experiment_task_and_takes_the_cache_group(throwaway, tmp_path):
    """specdec-exp task.name=NAME runs any probe; budgets and policy come from cache.* unless
    task.options gives them; the old fractions are one-line errors."""
    from types import SimpleNamespace

    from experiments.tasks import get_task, task_names

    with pytest.raises(SpecdecError, match="unknown task 'throwaway'"):
        get_task("throwaway")
    throwaway()
    assert {"throwaway", "eviction", "union_cost"} <= set(task_names())

    def cfg(**options):
        return SimpleNamespace(
            model=SimpleNamespace(path="tiny", bits=None),
            cache=SimpleNamespace(budget="10%", policy="sieve"),
            task=SimpleNamespace(options=options),
            max_tokens=8,
        )

    res = get_task("throwaway")(cfg(), tmp_path / "a")
    assert res.headline_name == "n_budgets" and res.headline == 1.0
    assert res.tables["throwaway"] == [{"budget": "10%", "policy": "sieve", "says": "hello"}]
    assert res.plots == [tmp_path / "a" / "throwaway.png"]
    res = get_task("throwaway")(cfg(budgets=["5%", "2GB"], policy="lru"), tmp_path / "b")
    assert [(r["budget"], r["policy"]) for r in res.tables["throwaway"]] == [
        ("5%", "lru"),
        ("2GB", "lru"),
    ]
    with pytest.raises(SpecdecError) as e:
        get_task("throwaway")(cfg(budgets=[0.05, "10%"]), tmp_path / "c")
    assert str(e.value) == (
        "task.options.budgets=[0.05, 10%]: a budget needs its unit; write [5%, 10%] for "
        "shares of the routed experts (or bytes, 512MiB, or slots, 96slots)"
    )
    with pytest.raises(SpecdecError, match=r"write \[10%\] for"):  # not 1000%: a percent already
        get_task("throwaway")(cfg(budgets=[10]), tmp_path / "c")
    with pytest.raises(SpecdecError, match="probe throwaway has no option colour"):
        get_task("throwaway")(cfg(colour="red"), tmp_path / "d")
