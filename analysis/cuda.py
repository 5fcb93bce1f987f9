"""docs/results/cuda.md: the streamed path measured on an NVIDIA H200, and the device model against it.

    python -m analysis.cuda scale        # budgets: tok/s, reads, against the limit
    python -m analysis.cuda spec         # speculation in measured seconds, break-even α
    python -m analysis.cuda lockstep     # the runs in lockstep with their own plain runs
    python -m analysis.cuda copies | auto_phases  # lockstep pairs on the same reads: by loaded
                                         # copy; auto split where it first drafted
    python -m analysis.cuda model        # modeled vs measured time per token, every run
    python -m analysis.cuda auto | lookahead | exact | offsets | batches | overhead | host_reads | shm | reads
    python -m analysis.cuda pinned       # --io pinned against --io direct (reads, landing, decode)
    python -m analysis.cuda decode9      # the ninth session's full-budget diagnosis
    python -m analysis.cuda where | land  # where a pass's time goes; landing by blocks a call
    python -m analysis.cuda span         # the read bench's test file against the pack's own blocks
    python -m analysis.cuda forced       # one fixed sequence's logits run against run, bit for bit;
                                         # the attention alone, cuDNN's on and off
    python -m analysis.cuda first_tokens # each decode token's time in fresh processes, full budget
    python -m analysis.cuda loop_parts | loop_profile  # our loop part by part beside mlx-lm's
    python -m analysis.cuda figure       # docs/figures/cuda_speedup_vs_acceptance.png
    python -m analysis.cuda landing --write   # h200-landing.yaml: land_gbps from the scale runs

Reads benchmarks/results/cuda/ (what `python benchmarks/bench_cuda.py ...` wrote on the H200:
STEP.json with each run's summary, STEP.jsonl with its pass records). Modeled times come from the
records through the device model (specdec.clock.passes `remodel`) on the profile of the machine
each run ran on. Four sessions, four lent machines: the first's `h200.yaml` as `specdec bench device`
measured it, and the same with `land_gbps` fitted on its five scale runs (what landing a read in
the GPU's memory costs: CUDA managed memory migrates on first touch), `h200-landing.yaml`; the
second's `h200-r2.yaml`, every field measured by `specdec bench device` (its `landing`
microbenchmark included), nothing fitted; the third's `h200-r3.yaml`, the same with its read curve
measured into slots the GPU has just read (`reads`: that and the fresh arena side by side); the
fourth's `h200-r4.yaml`, measured the same way. A run's `session` (absent: 1) says which.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from analysis._runs import md_table
from specdec.checkpoint.presets import like_config
from specdec.clock.passes import PassClock
from specdec.clock.profiles import load_profile, non_decreasing
from specdec.clock.shapes import ModelShape
from specdec.costmodel.speedup import break_even_words, measured_break_even
from specdec.decode.records import PassRecord
from specdec.decode.run import first_departure
from specdec.store.reader import READ_SPLIT
from specdec.stream.streamed import CUDA_REACH

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cuda"
FIGURE = ROOT / "docs" / "figures" / "cuda_speedup_vs_acceptance.png"
RUN_STEPS = ("scale", "spec", "auto", "drafters", "lookahead")  # from disk: the model's domain
# session -> the profiles of the machine its runs ran on; the last is the one they are modeled on
# (the first session measured no landing: h200-landing fitted it); a session that profiled again
# between its grids maps each budget to its own (`names`)
SESSIONS: dict[int, tuple[str, ...] | dict[str, tuple[str, ...]]] = {
    1: ("h200", "h200-landing"),
    2: ("h200-r2",),
    3: ("h200-r3",),
    4: ("h200-r4",),
    5: ("h200-r5",),
    6: ("h200-r6",),
    7: ("h200-r7",),
    10: ("h200-r10",),
    11: ("h200-r11",),
    13: ("h200-r13",),
    14: ("h100-r14",),  # an H100 (80GB HBM3) was lent that session, not an H200
    # an H100 again, runs and profile read by the pinned path; h100-r15b: its miss_call_s as the
    # fixed bench measured it in a second lease (the first read its misses buffered)
    15: ("h100-r15", "h100-r15b"),
    16: ("h200-r16",),  # an H200 again, pinned reads
    17: ("h100-r17",),  # an H100 (80GB HBM3), pinned reads
    18: ("h100-r18",),  # an H100, pinned reads; the read curve from the 16-layer pack in place
    19: ("h100-r19",),  # an H100 again, the same; 9 GB and 10% priced on the pack's curve
    20: ("h100-r20",),  # an H100 again, the same grids; 9 GB α 0.9 twice in the session
    21: ("h100-r21",),  # an H100 again, the 9 GB and 10% grids each twice
    # an H100 again, `--gamma auto` over 1024 tokens at 9 GB (no profile step: priced and
    # modeled on the twenty-first's)
    22: ("h100-r21",),
    # an H100 again, `--gamma auto` over 2048 tokens at 9 GB (priced on the twenty-first's too)
    23: ("h100-r21",),
    # an H100 again: MLX's cuDNN decode attention found to be what varies run to run (`forced`);
    # `--gamma auto` over 1024 tokens at 9 GB with it off, specdec's default since (priced on the
    # twenty-first's too)
    24: ("h100-r21",),
    # an H100 again: `forced` with the streamed pairs' cuDNN attention off, `ties`, the
    # full-budget pairs on both shapes, `attention_speed` alternating (no priced runs: its `auto`
    # did not reach the end of a run before the lease's budget ran out)
    25: ("h100-r21",),
    # an H100 again, lent late with 523 s left: `first_tokens` alone (no priced runs)
    26: ("h100-r21",),
    # an H100 again: `first_tokens` after the first fix, `--gamma auto` beside γ = 4 over 1536
    # tokens at 9 GB with cuDNN's attention off (priced on the twenty-first's), the warm
    # full-budget pairs in one process
    27: ("h100-r21",),
    # an H100 again, after two sessions without a machine: `loop_parts` (our loop part by part
    # beside mlx-lm's), `first_tokens` after the second fix, the full-budget pairs (no priced runs)
    30: ("h100-r21",),
    # an H100 again: `loop_parts` with counted steps beside replayed ones, the full-budget pairs
    # twice (4 pairs each: overhead.json, overhead-2.json), `first_tokens` (no priced runs)
    31: ("h100-r21",),
    # an H100 again, its own profile: the 9 GB grid in lockstep (specdec.bench.lockstep) three
    # times (the third at α 0.85-1.0 by 0.05), the 10% grid in lockstep once, the 9 GB grid
    # between plain runs twice, interleaved with them; the full-budget pairs (a second lease:
    # the MiniMax shape's warm part again, overhead-2.json)
    32: ("h100-r32",),
    # an H100 again, its own profile (its read curve written non-decreasing, as `specdec bench
    # device` writes it since the thirty-second): the 9 GB grid in lockstep at α 0.85-1.0 by
    # 0.05, the 10% grid in lockstep (the pair at α 0.9 γ = 4 cut by its deadline)
    33: ("h100-r33",),
    # an H200, the first since the sixteenth, its own profile: the 9 GB and 10% grids in
    # lockstep at α 0.85-1.0 by 0.05, `--gamma auto` beside γ = 4 over 512 tokens at 9 GB in
    # lockstep
    34: ("h200-r34",),
    # an H100 again, its own profile: `--gamma auto` over 1024 tokens at 9 GB in lockstep, α 1.0
    # (where it drafts: from about token 510)
    35: ("h100-r35",),
    # an H100 again, its own profile: lockstep's rounds alternating their lead; `--gamma auto`
    # over 512 tokens at 9 GB, α 1.0, four times (one pair beside the γ = 1 control)
    36: ("h100-r36",),
    37: ("h100-r37",),
    # an H100 again: `copies` at 9 GB; its profile measured after `copies` (h100-r38, the runs
    # priced on it) and again after the runs (h100-r38-2), and their bracket (the two's mean);
    # `--gamma auto` over 512 tokens at 9 GB, α 1.0, in lockstep twice
    38: ("h100-r38-2", "h100-r38+h100-r38-2", "h100-r38"),
    # an H100 again, profiled three times: before the 9 GB grid (h100-r39, what it and the
    # 128-slot auto pair are priced on), between them and the 10% grid (h100-r39-2, what that
    # grid is priced on) and after it (h100-r39-3): each budget's runs on the profiles either side
    # of them and their bracket, the bracket named before any run (the prospective test)
    39: {
        "9GB": ("h100-r39-2", "h100-r39+h100-r39-2", "h100-r39"),
        "128slots": ("h100-r39-2", "h100-r39+h100-r39-2", "h100-r39"),
        "10%": ("h100-r39-3", "h100-r39-2+h100-r39-3", "h100-r39-2"),
    },
}
# sessions that ran no profile step: their runs are priced on an earlier session's profile,
# measured on another machine (its disk's rate among them), so the model table lists them apart
BORROWED = {22, 23, 24, 25, 26, 27, 30, 31}
# the figure's runs: the sixth session's whole α grid at 10% and 9 GB (one plain run a budget),
# the seventh's with plain runs interleaved (9 GB, and one token's experts at α 0.6 / 0.8 / 1.0),
# the thirteenth's 48-token runs (9 GB, γ = 3 and 4 at α 0.7-1.0, plain interleaved), the
# fourteenth's the same on an H100, the fifteenth's on an H100 with pinned reads, the sixteenth's
# (an H200, pinned) at 10% and one token's experts (120 slots, beside auto) at α 0.9 and 1.0, the
# seventeenth's (an H100, pinned) at 10% (α 0.9 and 1.0) and 120 slots (γ = 4 beside auto, α 1.0),
# the eighteenth's (an H100, pinned) the same 120-slot pair over 96 tokens, the nineteenth's (an
# H100, pinned, priced on the pack's read curve) at 9 GB (α 0.8-1.0), 10% (α 0.9, 1.0) and the
# 120-slot pair at α 0.9, the twentieth's (the same card and grids) at 9 GB and 10%, the
# twenty-first's the same twice; the thirty-third's in lockstep, priced on its own profile as
# `specdec bench device` wrote it (9 GB at α 0.85-1.0, 10% at α 0.9 and 1.0); the thirty-fourth's
# the same on an H200 (both budgets at α 0.85-1.0); the thirty-ninth's on an H100, each grid on
# the profile written right before it (9 GB at α 0.85-1.0, 10% at α 0.9-1.0)
FIGURE_SESSIONS = (6, 7, 13, 14, 15, 16, 17, 18, 19, 20, 21, 33, 34, 39)
# the split's sessions: the tenth, which it was built for (with the eleventh), and every one
# since, so a new session needs no edit here (the twelfth ran no spec step: no rows)
SPLIT_FROM = 10
GAMMAS_SHOWN = (2, 3, 4, 8)  # the figure's γ, in its colour order
FIGURE_COLUMNS = 5  # panels a row
LAYERS = 16  # the 16-layer MiniMax-M2.5-shaped checkpoint of bench_cuda.py's `big` step
FIRST_USE_S = 1.0  # a pass or call past this off the disk paid a one-off first-use cost


def profiles() -> dict:
    """Every profile SESSIONS names: a file's, or "A+B", the bracket of A and B (the mean of
    profiles measured before and after a session's runs: specdec.clock.bracket)."""
    return {p: _profile(p) for s in SESSIONS.values()
            for group in (s.values() if isinstance(s, dict) else [s]) for p in group}  # fmt: skip


def _profile(name: str):
    from specdec.clock.bracket import bracket

    parts = name.split("+")
    if len(parts) == 1:
        return load_profile(RESULTS / f"{name}.yaml")
    return bracket([load_profile(RESULTS / f"{p}.yaml") for p in parts])


def misaddressed(row: dict) -> bool:
    """A run before the fix (fifth session) whose arena passed MLX's CUDA gather kernels' reach
    (stream/streamed.py `CUDA_REACH`: the 16-layer model's 25% and 9 GB, slots from 911): the
    experts in those slots were read from the wrong place. Its timing is what those kernels
    cost; its tokens, and so its realized acceptance, are not the model's."""
    if row.get("session", 1) >= 5:
        return False
    # the third session's rows, rebuilt from its records, lack the slots: its budget's plan's
    slots = row.get("cache_slots") or _plan_slots()[row["budget"]]
    return slots * _slot_elements() > CUDA_REACH.elements


@functools.cache
def _plan_slots() -> dict[str, int]:
    """Budget -> arena slots of the 16-layer model, as its scale runs recorded them."""
    return {r["budget"]: r["cache_slots"] for r in runs("scale")}


@functools.cache
def _slot_elements() -> int:
    """One projection of one 16-layer MiniMax expert, in 4-bit elements (out × in)."""
    cfg = like_config("minimax-m2.5", LAYERS)
    return cfg["hidden_size"] * cfg["intermediate_size"]


def names(row: dict) -> tuple[str, ...]:
    """The profiles `row` is modeled on (SESSIONS): its session's, or its budget's where the
    session profiled again between its grids."""
    got = SESSIONS[row.get("session", 1)]
    return got[row["budget"]] if isinstance(got, dict) else got


def own(row: dict) -> str:
    """The profile of the machine `row` ran on (fitted landing on the first: none was measured)."""
    return names(row)[-1]


def _read_gbps(recs: list[PassRecord]) -> float:
    """GB/s the run's reads reached: bytes read over the time reads were in flight."""
    return sum(r.bytes_read for r in recs) / max(sum(r.read_s for r in recs), 1e-9) / 1e9


def _clock(drafter: str) -> PassClock:
    cfg = like_config("minimax-m2.5", LAYERS)
    cfg["quantization"] = {"group_size": 64, "bits": 4}  # as make-random writes it
    shape = ModelShape.from_config(cfg, moe_layers=list(range(LAYERS)))
    kind = "main" if drafter == "self" else "none"  # oracle and lookup draft nothing on device
    return PassClock(shape, tuple(range(LAYERS)), kind, None, None)


@functools.cache
def runs(step: str) -> list[dict]:
    """The step's runs, each with its records (matched by order: one JSONL line per run); parsed
    once a process (every table reads them; none changes them)."""
    rows = json.loads((RESULTS / f"{step}.json").read_text())["runs"]
    lines = (RESULTS / f"{step}.jsonl").read_text().splitlines()
    for row, line in zip(rows, lines, strict=True):
        row["records"] = [PassRecord.from_row(r, step) for r in json.loads(line)["records"]]
    return rows


_MODELED: dict = {}  # (the run's records, profile) -> modeled tok/s: tables share runs


def modeled_tps(row: dict, profile) -> float:
    key = (id(row["records"]), profile)
    if key not in _MODELED:
        clock = _clock(row["drafter"])
        seconds = sum(clock.remodel(profile, r).total_s for r in row["records"])
        _MODELED[key] = (row["records"], row["committed"] / seconds)  # records kept: id stays
    return _MODELED[key][1]


def own_reads_tps(row: dict, profile) -> float:
    """The model with the disk taken out: its modeled time on a profile whose reads cost nothing
    (compute, syncs, landing) plus the time the run was measured blocked on reads. Its error is
    what the model gets wrong apart from the disk's rate (which drifts between the profile's bench
    and the runs)."""
    seconds = row["committed"] / modeled_tps(row, profile.diskless()) + sum(
        r.blocked_s for r in row["records"]
    )
    return row["committed"] / seconds


def beside_tps(row: dict, profile) -> float | None:
    """The model on the profile with its read curve scaled to the read bench run beside this
    run (`read_beside_gbps`: the run's own reader over random blocks just before it, at the
    profile's reads in flight), so the disk's drift between the profile's bench and the run is
    measured, not absorbed; None for runs without one (before the fifth session)."""
    gbps = row.get("read_beside_gbps")
    if not gbps:
        return None
    scale = gbps / profile.read_gbps(profile.reads_in_flight)
    curve = tuple((n, g * scale) for n, g in profile.read_curve)
    return modeled_tps(row, replace(profile, read_curve=curve))


def measured_tps(row: dict) -> float:
    """Committed tokens per second of decode (the passes' wall time, prefill excluded)."""
    return row["committed"] / sum(r.wall_s for r in row["records"])


def device_tps(row: dict) -> float:
    """measured_tps without `--gamma auto`'s host work, which the device model does not price:
    its bookkeeping after each pass (`books_s`, counted in a pass's wall since the twenty-third
    session, absent from earlier records) and its choosing before it (`choose_s`, recorded from
    the thirty-sixth): what the model's tables check the model against."""
    return row["committed"] / sum(r.wall_s - r.books_s - r.choose_s for r in row["records"])


def _label(row: dict) -> str:
    return row["drafter"] if row["drafter"] != "none" else "plain"


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "—" if x is None else format(x, fmt)


def scale_table() -> str:
    profs = profiles()
    body = []
    for row in runs("scale"):
        prof = profs[own(row)]  # the machine it ran on: its read bench and compute
        recs = row["records"]
        n = row["committed"]
        wall = sum(r.wall_s for r in recs)
        blocked = sum(r.blocked_s for r in recs)
        miss = sum(r.bytes_read for r in recs)
        misses_per_layer = max(1.0, sum(r.reads for r in recs) / len(recs) / LAYERS)
        bench = prof.read_gbps(min(misses_per_layer, prof.reads_in_flight))
        compute = 1 / modeled_tps({**row, "records": [_no_reads(r) for r in recs]}, prof) * n
        limit = max(compute, miss / (bench * 1e9))
        body.append([
            row.get("session", 1), row["budget"], row["routing"], _f(measured_tps(row)),
            f"{1e3 * wall / n:.0f}",
            f"{1e3 * blocked / n:.0f}", f"{miss / n / 1e6:.0f}", f"{row['hit_rate']:.2f}",
            f"{_read_gbps(recs):.2f}", f"{bench:.2f}", f"{wall / limit:.2f}",
        ])  # fmt: skip
    heads = ["session", "budget", "routing", "tok/s", "ms/token", "blocked ms/token",
             "MB read/token", "hit rate", "read GB/s", "bench GB/s", "time / limit"]  # fmt: skip
    return md_table(heads, body)


def _no_reads(r: PassRecord) -> PassRecord:
    """The pass with its reads taken away: what its compute alone costs on the device model."""
    steps = {ph: [[s[0], s[1], 0, 0, 0, s[5]] for s in group] for ph, group in r.steps.items()}
    return PassRecord(**{**r.__dict__, "steps": steps})


def spec_rows(steps: tuple[str, ...] = ("spec", "drafters", "auto")) -> list[dict]:
    """Every speculative run of `steps` with the plain runs it is measured against. A run in
    lockstep (`bench_cuda.py --lockstep`, from the thirty-second session): its own pair's plain
    run, and `grid`, which of its session's lockstep grids at that budget it is in (numbered
    across the steps: the auto step's pairs are a grid of their own). Any other:
    the plain runs of its step, budget and routing on either side of it, the last before it
    (its `plain`: the reference of its tokens and bytes) and the first after it, where the step
    interleaves plain runs (from the sixth session: one before each group and one after the
    last); before that, one plain run opened each budget."""
    out = []
    grids: dict = {}  # (session, budget, routing) -> lockstep grids so far (pair 0 opens one)
    for step in steps:
        last: dict = {}  # (session, budget, routing) -> its latest plain run
        waiting: dict = {}  # the same -> its runs since then, waiting for the next plain run
        pairs: dict = {}  # (session, budget, routing, lockstep pair) -> the pair's plain run
        for row in runs(step):
            key = (row.get("session", 1), row["budget"], row["routing"])
            if "lockstep" in row:
                pair = (key, row["lockstep"])
                if row["drafter"] == "none":
                    pairs[pair] = row
                    grids[key] = grids.get(key, 0) + (row["lockstep"] == 0)
                else:
                    plain = pairs[pair]
                    out.append({**row, "plain": plain, "plains": [plain], "grid": grids[key],
                                "step": step})  # fmt: skip
                continue
            if row["drafter"] != "none":
                if key in last:
                    out.append({**row, "plain": last[key], "plains": [last[key]], "step": step})
                    waiting.setdefault(key, []).append(out[-1])
                continue
            for run in waiting.pop(key, []):
                run["plains"].append(row)
            last[key] = row
    return out


def drafts_fixed(row: dict) -> bool:
    """A speculative run at a fixed γ > 1: not auto, and not the auto step's γ = 1 control
    (`--auto-gammas 1`: the speculative path without a draft), which has no break-even."""
    return row["gamma"] not in ("auto", "1")


def plain_tps(row: dict) -> float:
    """The plain rate a speculative run is compared with: its bracketing plain runs' mean time
    per token."""
    return 1 / statistics.mean(1 / measured_tps(p) for p in row["plains"])


def measured_speedup(row: dict) -> float:
    """A speculative run's measured tok/s over its bracketing plain runs' (`plain_tps`)."""
    return measured_tps(row) / plain_tps(row)


def _speedups(row: dict, profs: dict) -> tuple[float, dict]:
    """Measured speed-up, and modeled on each profile of the machine the run ran on."""
    measured = measured_speedup(row)
    modeled = {n: modeled_tps(row, profs[n]) / modeled_tps(row["plain"], profs[n])
               for n in names(row)}  # fmt: skip
    return measured, modeled


def first_use(row: dict) -> float | None:
    """Seconds of a pass whose time off the disk is a one-off first-use cost in the process
    (over FIRST_USE_S and 5x the run's median pass), or None. Two of the runs have one: the
    first session's 128-slot γ = 8 at α 0.5 (19.6 s), the seventh's first speculative run
    (3.9 s, its first γ = 2 pass); bench_cuda.py warms every γ up since."""
    off = [r.compute_s for r in row["records"]]
    slow = [c for c in off if c > FIRST_USE_S and c > 5 * statistics.median(off)]
    return max(slow) if slow else None


def _departure(row: dict) -> str:
    """Where a speculative run's tokens part from its plain run's (lossless: never)."""
    first = first_departure(row["tokens"], row["plain"]["tokens"])
    text = "equal" if first is None else f"departs at {first}"
    slow = first_use(row)
    return (text + (" (misaddressed experts)" if misaddressed(row) else "")
            + (f" (a {slow:.1f} s first-use pass)" if slow else ""))  # fmt: skip


def spec_table(sessions: tuple[int, ...] | None = None) -> str:
    profs = profiles()
    body = []
    for row in spec_rows():
        if row["gamma"] == "auto" or (sessions and row.get("session", 1) not in sessions):
            continue
        measured, modeled = _speedups(row, profs)
        bytes_ratio = row["bytes_per_token"] / row["plain"]["bytes_per_token"]
        body.append([
            row["budget"], row["drafter"], row["gamma"], _f(row.get("acceptance")),
            _f(measured_tps(row)), f"{measured:.2f}x", f"{modeled[own(row)]:.2f}x", own(row),
            f"{bytes_ratio:.2f}x", _departure(row),
        ])  # fmt: skip
    heads = ["budget", "drafter", "γ", "acceptance", "tok/s", "speed-up, measured", "modeled",
             "profile", "bytes/token vs plain", "tokens vs plain"]  # fmt: skip
    return md_table(heads, body) + "\n" + break_even_text(profs, sessions)


def lockstep_table() -> str:
    """The runs in lockstep (`bench_cuda.py --lockstep`), pair by pair: the loaded copy the run
    decoded on (`run_copy`: the second copy's reads blocked longer until staging was in 2 MiB
    pages, `copies_table`), each side's
    tok/s, the read GB/s each side's reads reached (bytes over the time a read was in flight)
    and its misses a MoE layer a pass; then how far apart a session's runs of one (budget, α,
    γ) land, in lockstep and between plain runs, and the model's speed-up error on the lockstep
    runs on the profile's read curve and on the same curve made non-decreasing (as `specdec
    bench device` writes it since: clock.profiles.non_decreasing)."""
    profs = profiles()
    body: list = []
    errs: dict = {}  # (session, curve) -> modeled speed-up / measured - 1
    per_token: dict = {}  # (session, curve) -> modeled time / measured - 1, both sides
    crossings: dict = {}  # (session, grid, budget, γ) -> [(α, measured, modeled non-decreasing)]
    for row in spec_rows():
        if "lockstep" not in row:
            continue
        plain, prof = row["plain"], profs[own(row)]
        sides = [(_read_gbps(r["records"]), _misses_a_layer(r)) for r in (plain, row)]
        body.append([
            row.get("session", 1), row["grid"], row["budget"], row["drafter"], row["gamma"],
            _copy_word(row),
            _f(measured_tps(plain)), _f(measured_tps(row)), f"{measured_speedup(row):.2f}x",
            f"{sides[0][0]:.2f} / {sides[1][0]:.2f}", f"{sides[1][0] / sides[0][0]:.2f}",
            f"{sides[0][1]:.1f} / {sides[1][1]:.1f}",
        ])  # fmt: skip
        sess, curves = row.get("session", 1), {"curve": prof}
        flat = non_decreasing(prof.read_curve)
        if flat != prof.read_curve:  # written before the thirty-second: as measured, and made so
            curves["curve made non-decreasing"] = replace(prof, read_curve=flat)
        for name, pr in curves.items():
            modeled = modeled_tps(row, pr) / modeled_tps(plain, pr)  # the last: non-decreasing
            errs.setdefault((sess, name), []).append(modeled / measured_speedup(row) - 1)
            per_token.setdefault((sess, name), []).extend(
                device_tps(r) / modeled_tps(r, pr) - 1 for r in (plain, row)
            )
        if row["drafter"].startswith("oracle:") and drafts_fixed(row):
            alpha = float(row["drafter"].split(":")[1])
            crossings.setdefault((sess, row["grid"], row["budget"], row["gamma"]), []).append(
                (alpha, measured_speedup(row), modeled)
            )
    heads = ["session", "grid", "budget", "drafter", "γ", "the run's copy", "plain tok/s",
             "tok/s", "speed-up", "read GB/s plain / spec", "spec / plain",
             "misses a layer a pass"]  # fmt: skip
    lines = []
    for (sess, name), v in errs.items():
        t = per_token[(sess, name)]
        made = (sess, "curve made non-decreasing") in errs
        curve = name if made else f"{name}, non-decreasing as written"
        lines.append(
            f"- session {sess}, the model against the measured on the profile's read {curve}: "
            f"speed-up ({len(v)} runs) median {statistics.median(v):+.1%}, worst "
            f"{max(v, key=abs):+.1%}; time per token ({len(t)}, both sides) median "
            f"{statistics.median(t):+.1%}, median |error| "
            f"{statistics.median(abs(e) for e in t):.1%}, worst {max(t, key=abs):+.1%}"
        )
    for (sess, grid, budget, gamma), pts in sorted(crossings.items()):
        pts.sort()
        lo, hi = pts[0][0], pts[-1][0]
        meas, mod = (measured_break_even([(a, p[i]) for a, *p in pts]) for i in (0, 1))
        lines.append(
            f"- session {sess} grid {grid}, {budget}, γ = {gamma}: break-even α measured "
            f"{break_even_words(meas, lo, hi)}, modeled on the non-decreasing read curve "
            f"{break_even_words(mod, lo, hi)}"
        )
    return md_table(heads, body) + "\n" + "\n".join(lines + _spreads()) + "\n"


def _misses_a_layer(row: dict) -> float:
    """Blocks a run read a pass, over the 16-layer model's MoE layers."""
    recs = row["records"]
    return sum(r.reads for r in recs) / len(recs) / LAYERS


def _spreads() -> list[str]:
    """Per session that ran a (budget, α, γ) more than once: the widest spread of its measured
    speed-ups, in lockstep and between plain runs."""
    by: dict = {}
    for row in _oracle_grid():
        how = "in lockstep" if "lockstep" in row else "between plain runs"
        # a step's runs apart: the auto step's runs are longer than the spec grid's
        key = (row.get("session", 1), how, row["step"], row["budget"], row["drafter"], row["gamma"])
        by.setdefault(key, []).append(measured_speedup(row))
    widest: dict = {}
    lockstep_sessions = {sess for sess, how, *_ in by if how == "in lockstep"}
    for (sess, how, _, *run), ups in by.items():
        if len(ups) > 1 and sess in lockstep_sessions:
            spread = max(ups) - min(ups)
            if spread >= widest.get((sess, how), (0.0,))[0]:
                widest[(sess, how)] = (spread, run, len(ups))
    return [
        f"- session {sess}, {how}: one (budget, α, γ) measured {n} times lands up to "
        f"{spread:.2f} apart ({run[0]} {run[1]} γ = {run[2]})"
        for (sess, how), (spread, run, n) in sorted(widest.items())
    ]


def _oracle_grid(sessions: tuple[int, ...] | None = None) -> list[dict]:
    """The oracle runs at a fixed γ > 1 whose computation was the model's (not misaddressed)."""
    return [
        row
        for row in spec_rows()
        if row["drafter"].startswith("oracle:")
        and drafts_fixed(row)
        and not misaddressed(row)
        and not first_use(row)
        and (sessions is None or row.get("session", 1) in sessions)
    ]


def break_even_text(profs: dict, sessions: tuple[int, ...] | None = None) -> str:
    """Measured and modeled break-even α per γ (oracle runs), where the speed-up crosses 1, per
    session (each lockstep grid apart; other runs of a session pooled); misaddressed runs left
    out."""
    lines = []
    by: dict = {}
    for row in _oracle_grid(sessions):
        alpha = float(row["drafter"].split(":")[1])
        how = f" (lockstep grid {row['grid']})" if "lockstep" in row else ""
        by.setdefault((row.get("session", 1), how, row["budget"], row["gamma"]), []).append(
            (alpha, *_speedups(row, profs), own(row))
        )
    for (sess, how, budget, gamma), pts in sorted(
        by.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], int(kv[0][3]))
    ):
        pts.sort()
        meas = measured_break_even([(a, m) for a, m, _, _ in pts])
        mod = measured_break_even([(a, d[prof]) for a, _, d, prof in pts])
        lo, hi = pts[0][0], pts[-1][0]
        lines.append(
            f"- session {sess}{how}, {budget}, γ = {gamma}: measured break-even α "
            f"{break_even_words(meas, lo, hi)}; "
            f"modeled ({pts[0][3]}) {break_even_words(mod, lo, hi)}"
        )
    return "\n".join(lines) + "\n"


def model_row(row: dict, name: str) -> str:
    """The model table's row for `row` modeled on profile `name`: the profile's, or, where the
    profile is another machine's (BORROWED) or one grid's of a session that profiled between its
    grids, the profile's for that session's runs, or that grid's, apart."""
    sess = row.get("session", 1)
    if sess in BORROWED:
        return f"{name}, session {sess}'s runs"
    if isinstance(SESSIONS[sess], dict):  # one grid's "after" may be the next one's "before"
        return f"{name}, session {sess}'s {row['budget']} runs"
    return name


def model_table() -> str:
    """Modeled vs measured time per token over every run from disk, each on the profiles of the
    machine it ran on: the device model's error, and its error with each run's own read time
    (`own_reads_tps`: what the model misses apart from the disk's rate)."""
    profs = profiles()
    errors: dict[str, dict[str, list[tuple]]] = {n: {} for n in profs}
    for step in RUN_STEPS:
        for row in runs(step):
            if first_use(row):  # not what the model prices: listed in the spec table
                continue
            for n in names(row):
                m = device_tps(row)
                err = m / modeled_tps(row, profs[n]) - 1  # modeled time / measured time - 1
                own = m / own_reads_tps(row, profs[n]) - 1
                beside = beside_tps(row, profs[n])
                errors.setdefault(model_row(row, n), {}).setdefault(step, []).append(
                    (err, own, beside and m / beside - 1)
                )
    body = []
    for n, steps in errors.items():
        if not steps:  # a profile named only per budget: its runs are under those keys
            continue
        allerr = [e for es in steps.values() for e in es]
        for step in (*[s for s in RUN_STEPS if s in steps], "all"):
            rows = allerr if step == "all" else steps[step]
            cols = [[r[i] for r in rows if r[i] is not None] for i in range(3)]
            body.append([n, step, len(rows), f"{statistics.median(cols[0]):+.1%}"]
                        + [c for col in cols for c in _abs_worst(col)])  # fmt: skip
    heads = ["profile", "runs", "n", "median error", "median |error|", "worst",
             "own reads: median |error|", "worst", "read bench beside: median |error|",
             "worst"]  # fmt: skip
    return md_table(heads, body)


def split_table(sessions: tuple[int, ...] = tuple(s for s in SESSIONS if s >= SPLIT_FROM)) -> str:
    """Where the device model's time per committed token goes against the measured, run by run
    (spec runs of `sessions`, on their machine's profile): measured time blocked on reads and
    off the disk; modeled reads, landing (the profile's landing taken out) and the rest
    (compute and router syncs), ms per committed token; and the unpriced time per block read
    (fresh: the verify phase's misses)."""
    profs, body = profiles(), []
    for row in runs("spec"):
        sess = row.get("session", 1)
        if sess not in sessions or first_use(row):
            continue
        prof = profs[own(row)]
        clock, n = _clock(row["drafter"]), row["committed"]
        dry = replace(prof, land_curve=(), land_gbps=None)
        full = [clock.remodel(prof, r) for r in row["records"]]
        read = sum(clock.remodel(dry, r).read_s for r in row["records"])
        land = sum(m.read_s for m in full) - read
        rest = sum(m.compute_s + m.sync_s for m in full)
        blocked = sum(r.blocked_s for r in row["records"])
        wall = sum(r.wall_s for r in row["records"])
        ms = [1e3 * x / n for x in (blocked, wall - blocked, read, land, rest)]
        fresh = sum(r.verify_misses for r in row["records"])
        body.append([sess, _label(row), row["gamma"], *[f"{x:.0f}" for x in ms],
                     f"{ms[1] - ms[3] - ms[4]:+.0f}", f"{fresh / n:.0f}",
                     f"{(ms[1] - ms[3] - ms[4]) * n / fresh:+.2f}"])  # fmt: skip
    heads = ["session", "run", "γ", "measured: blocked", "off the disk", "modeled: reads",
             "landing", "the rest", "off the disk, unpriced", "fresh blocks",
             "unpriced, ms a fresh block"]  # fmt: skip
    return md_table(heads, body)


def _abs_worst(errs: list[float]) -> list[str]:
    """Median |error| and the worst error of a column ("—" where no run has it)."""
    if not errs:
        return ["—", "—"]
    return [f"{statistics.median(abs(e) for e in errs):.1%}", f"{max(errs, key=abs):+.1%}"]


def shm_table() -> str:
    """The runs from a copy of the pack in /dev/shm (reads at memory speed: the "fast SSD" end),
    each against the plain run at its budget there and, where one ran, on disk in the same
    session (the first plain trace-routed run of the scale and spec steps at that budget)."""
    disk: dict = {}
    for step in ("scale", "spec"):
        for r in runs(step):
            if r["drafter"] == "none" and r["routing"] == "trace":
                disk.setdefault((r.get("session", 1), r["budget"]), r)
    body, plain = [], {}
    for row in runs("shm"):
        key = (row.get("session", 1), row["budget"])
        if row["drafter"] == "none":
            plain[key] = row
        base = plain[key]
        recs = row["records"]
        on_disk = disk.get(key)
        body.append([
            key[0], row["budget"], _label(row), row["gamma"], _f(measured_tps(row)),
            f"{measured_tps(row) / measured_tps(base):.2f}x",
            "—" if on_disk is None else f"{measured_tps(row) / measured_tps(on_disk):.2f}x",
            f"{row['bytes_per_token'] / 1e6:.0f}",
            f"{1e3 * sum(r.blocked_s for r in recs) / row['committed']:.0f}",
            f"{_read_gbps(recs):.1f}",
        ])  # fmt: skip
    heads = ["session", "budget", "drafter", "γ", "tok/s", "vs plain (shm)", "vs plain on disk",
             "MB read/token", "blocked ms/token", "read GB/s"]  # fmt: skip
    return md_table(heads, body)


def auto_table() -> str:
    """`--gamma auto` runs against the plain runs around them (their mean time per token), with
    how far those plain runs themselves differ: a run that never drafted is plain's work, so its
    ratio is the disk's drift between runs; in lockstep, against its pair's plain run, and the
    loaded copy it decoded on (`run_copy`: the second-loaded copy's reads blocked longer until
    staging was in 2 MiB pages, `copies_table`)."""
    profs, rows, body = profiles(), spec_rows(), []
    for row in rows:
        if row["gamma"] != "auto":
            continue
        ratio = measured_speedup(row)
        hist = row.get("gamma_chosen_hist") or []
        drafting = sum(hist[2:]) if len(hist) > 2 else 0
        plains = row["plains"]  # the disk's drift: the later plain run against the earlier
        drift = measured_tps(plains[-1]) / measured_tps(plains[0]) if len(plains) > 1 else None
        body.append([row.get("session", 1), row["budget"], row["drafter"], f"{ratio:.2f}x",
                     _copy_word(row),
                     drafting, row["passes"], "—" if drift is None else f"{drift:.2f}x",
                     *_against_fixed(row, ratio, rows, profs)])  # fmt: skip
    heads = ["session", "budget", "drafter", "auto / plain, measured",
             "its copy, in lockstep (`copies`)", "passes with γ > 1", "passes",
             "plain after / plain before", "best fixed γ: speed-up",
             "auto / best fixed γ, measured", "modeled"]  # fmt: skip
    return md_table(heads, body)


def auto_phases(row: dict) -> list[tuple[range, list, list]]:
    """A lockstep `--gamma auto` run split where it first drafted: (its tokens, counted from 1;
    auto's passes; its pair's plain passes over the same tokens, one a pass) before that pass
    and from it on; one part where it never drafted, or drafted from its first pass."""
    recs, plain = row["records"], row["plain"]["records"]
    first = next((i for i, r in enumerate(recs) if r.drafted), len(recs))
    before = sum(r.committed for r in recs[:first])
    parts = [(range(1, before + 1), recs[:first], plain[:before])] if first else []
    if first < len(recs):
        parts.append((range(before + 1, row["committed"] + 1), recs[first:], plain[before:]))
    return parts


def _read_calls(r: PassRecord) -> int:
    """The pass's read calls: its cache steps that missed (each reads its misses in one call),
    in every phase."""
    return sum(1 for group in r.steps.values() for s in group if s[2])


def _per_call(recs: list[PassRecord]) -> float:
    """Blocked ms a read call over passes `recs`."""
    return 1e3 * sum(r.blocked_s for r in recs) / max(1, sum(map(_read_calls, recs)))


def _side(recs: list[PassRecord], tokens: int) -> dict:
    """One side of an `auto_phases` part: ms a token in wall, blocked, auto's bookkeeping and
    its choosing; blocked ms a read and a read call, the latter where the other side's pass ran
    just before and where the side's own did (`follows`); and a read call's thread-ms in
    preadv, landing and a pool worker's wake-up (`read_split`, recorded from the thirty-sixth
    session: `io` None, "—" before)."""

    def total(field: str) -> float:
        return sum(getattr(r, field) for r in recs)

    calls = max(1, sum(map(_read_calls, recs)))
    kept = any(r.read_split for r in recs)
    thread = [1e3 * sum(r.read_split.get(k, 0.0) for r in recs) / calls for k in READ_SPLIT]
    followed = any(r.follows is not None for r in recs)
    return {
        **{f: 1e3 * total(f) / tokens for f in ("wall_s", "blocked_s", "books_s", "choose_s")},
        "rest": 1e3 * (total("wall_s") - total("blocked_s")) / tokens,
        "read": 1e3 * total("blocked_s") / max(1, total("reads")),
        "call": _per_call(recs),
        "io": thread[READ_SPLIT.index("io_s")] if kept else None,
        "split": " / ".join(f"{v:.2f}" for v in thread) if kept else "—",
        "after": " / ".join(
            f"{_per_call([r for r in recs if r.follows is f]):.2f}" for f in (True, False)
        )
        if followed
        else "—",  # fmt: skip
    }


def run_copy(row: dict) -> int:
    """The loaded copy a lockstep run decoded on, 0 the first loaded and 1 the second: its
    pair's plain side takes the first copy in even pairs, the second in odd ones
    (specdec.bench.lockstep `paired_runs`; `row["lockstep"]` is the pair's number)."""
    return 1 if row["lockstep"] % 2 == 0 else 0


COPY_WORDS = ("first", "second")  # a loaded copy in a table, by `run_copy`'s number


def _copy_word(row: dict) -> str:
    """`run_copy` in a table (COPY_WORDS); "—" for a run not in lockstep."""
    return COPY_WORDS[run_copy(row)] if "lockstep" in row else "—"


def _unfixed_pairs(rows: list[dict] | None = None) -> Iterator[dict]:
    """The lockstep auto runs and γ = 1 controls among `rows` (spec_rows() where not given):
    the runs whose passes read as their pair's plain ones until they first draft."""
    return (r for r in (spec_rows() if rows is None else rows)
            if "lockstep" in r and not drafts_fixed(r))  # fmt: skip


def copies_table(rows: list[dict] | None = None) -> str:
    """Lockstep pairs whose two sides read the same blocks in the same read calls (an auto run
    before its first draft, or the γ = 1 control throughout), by the loaded copy each side
    decoded on rather than by side: blocked ms a read call on the first-loaded copy and on the
    second, and a read call's thread-ms in preadv on each (recorded from the thirty-sixth
    session). `rows`: spec_rows() where not given."""
    body = []
    for row in _unfixed_pairs(rows):
        tokens, mine, theirs = auto_phases(row)[0]
        if any(r.drafted for r in mine):
            continue  # drafted from its first pass: no part on the same reads
        by_copy = (theirs, mine) if run_copy(row) else (mine, theirs)
        first, second = (_side(rs, len(tokens)) for rs in by_copy)
        io = "—" if first["io"] is None else f"{first['io']:.2f} / {second['io']:.2f}"
        body.append([row.get("session", 1), row["budget"], row["gamma"], row["lockstep"],
                     _copy_word(row), f"{tokens[0]}-{tokens[-1]}",
                     f"{first['call']:.2f} / {second['call']:.2f}",
                     f"{second['call'] / first['call']:.3f}", io])  # fmt: skip
    heads = ["session", "budget", "γ", "pair", "the run's copy", "tokens",
             "blocked ms a read call: first copy / second", "second / first",
             "preadv thread-ms a read call: first / second"]  # fmt: skip
    return md_table(heads, body)


def copies_bench_table() -> str:
    """The two copies' readers alone (bench_cuda.py `copies`, from the thirty-seventh session):
    per copy and staging, over the step's rounds, the median ms a read call and a call's median
    thread-ms in preadv, landing and a worker's wake-up; the median of the rounds' second /
    first ratios (a call's ms). A session whose step predates the staging's choice staged as
    the reader then did (`np.empty`: 4 KiB pages unless THP is "always"; the pages not
    recorded): "—"."""
    body = []
    for sess, path in _session_results("copies.json"):
        data = json.loads(path.read_text())
        pages = data.get("staging_huge_pages") or [None, None]
        ratios = data["second_over_first"]
        for kind in dict.fromkeys(x.get("staging") for x in data["rounds"]):
            cells = [[x for x in data["rounds"] if x["copy"] == c and x.get("staging") == kind]
                     for c in (0, 1)]  # fmt: skip
            ratio = ratios[kind] if kind else ratios
            for c, xs in enumerate(cells):
                med = {k: statistics.median(x[f"{k}_ms_a_call"] for x in xs)
                       for k in ("median", "io_s", "land_s", "wake_s")}  # fmt: skip
                huge = "—" if kind != "2MiB" or pages[c] is None else f"{pages[c]:.0%}"
                body.append([sess, data["io"], data["budget"], data["blocks"], data["batch"],
                             kind or "—", COPY_WORDS[c], huge, len(xs),
                             f"{med['median']:.2f}", f"{med['io_s']:.2f}",
                             f"{med['land_s']:.2f}", f"{med['wake_s']:.2f}",
                             f"{ratio['median']:.3f}" if c else ""])  # fmt: skip
    heads = ["session", "io", "budget", "blocks", "blocks a call", "staging's pages", "copy",
             "huge pages, measured", "rounds", "ms a call (median)",
             "preadv thread-ms a call", "landing", "wake-up", "second / first, a call"]  # fmt: skip
    return md_table(heads, body)


def auto_phases_table() -> str:
    """`--gamma auto` runs in lockstep split where auto first drafted (`auto_phases`): before
    it, auto is plain by its own choice (plain's work plus its bookkeeping); beside them any
    γ = 1 run of the auto step (`--auto-gammas 1`: the speculative path, no draft, no auto),
    the control that has auto's path without its bookkeeping. Each part against its pair's
    plain run over the same tokens (`_side`): in ms a token wall, blocked on reads, the rest,
    auto's bookkeeping after its passes and its choosing before them (both in its wall;
    choosing recorded from the thirty-sixth session); blocked ms a read and a read call
    (before the first draft both sides read the same blocks in the same calls), where a read
    call's thread-time went on each side, and a read call's blocked ms where the other side's
    pass ran just before and where the side's own did (lockstep's rounds alternate their lead
    from the thirty-sixth session: before it, the plain side always led)."""
    body = []
    for row in _unfixed_pairs():
        for tokens, mine, theirs in auto_phases(row):
            a, p = (_side(rs, len(tokens)) for rs in (mine, theirs))
            both = [f"{a[k]:{f}} / {p[k]:{f}}" for k, f in (("wall_s", ".1f"), ("blocked_s", ".1f"),
                                                          ("rest", ".1f"), ("read", ".2f"),
                                                          ("call", ".2f"))]  # fmt: skip
            body.append([row.get("session", 1), row["budget"], row["drafter"], row["gamma"],
                         f"{tokens[0]}-{tokens[-1]}", sum(1 for r in mine if r.drafted), len(mine),
                         f"{p['wall_s'] / a['wall_s']:.3f}x", *both, f"{a['books_s']:.2f}",
                         f"{a['choose_s']:.2f}", a["split"], p["split"], a["after"],
                         p["after"]])  # fmt: skip
    heads = ["session", "budget", "drafter", "γ", "tokens", "passes with γ > 1", "passes",
             "speed: run / plain", "ms a token: run / plain", "blocked", "not blocked",
             "blocked ms a read", "a read call", "auto's bookkeeping, ms a token",
             "its choosing (from session 36)", "a read call's io / land / wake: run",
             "plain", "blocked ms a read call after the other side / its own pass: run",
             "plain"]  # fmt: skip
    return md_table(heads, body)


def _against_fixed(row: dict, ratio: float, rows: list[dict], profs: dict) -> list[str]:
    """The fixed γ that ran with the same session, budget and drafter (bench_cuda.py `auto
    --auto-gammas`) and sped up most, each against its own plain runs: its γ and speed-up,
    auto's speed-up over it, and the same modeled (tok/s on the session's profile)."""
    key = (row.get("session", 1), row["budget"], row["drafter"])
    fixed = [r for r in rows if drafts_fixed(r)
             and (r.get("session", 1), r["budget"], r["drafter"]) == key]  # fmt: skip
    if not fixed:
        return ["—", "—", "—"]
    best = max(fixed, key=measured_speedup)
    speedup = measured_speedup(best)
    prof = profs[own(row)]
    modeled = modeled_tps(row, prof) / modeled_tps(best, prof)
    return [f"γ = {best['gamma']}: {speedup:.2f}x", f"{ratio / speedup:.2f}x", f"{modeled:.2f}x"]


def lookahead_table() -> str:
    body, base = [], {}
    profs = profiles()
    for row in runs("lookahead"):
        prof = profs[own(row)]
        key = (row.get("session", 1), row["budget"])
        if row["lookahead"] == 0:
            base[key] = row
        b = base[key]
        body.append([
            *key, row["lookahead"], _f(measured_tps(row)),
            f"{measured_tps(row) / measured_tps(b):.2f}x",
            f"{modeled_tps(row, prof) / modeled_tps(b, prof):.2f}x",
            f"{row['bytes_per_token'] / 1e6:.0f}", f"{row['hit_rate']:.2f}",
        ])  # fmt: skip
    heads = ["session", "budget", "lookahead", "tok/s", "vs none, measured", "vs none, modeled",
             "MB read/token", "hit rate"]  # fmt: skip
    return md_table(heads, body)


def exact_table(results: Path | None = None) -> str:
    data = json.loads((results or RESULTS / "exact.json").read_text())
    body, diffs = [], []
    for model in ("tiny", "qwen3", "minimax", "minimax4", "deepseek"):
        for case, r in data.get(model, {}).items():
            if case == "reference":
                continue
            if case.startswith("layer_diffs"):
                diffs.append([model, ", ".join(f"{d:.2g}" for d in r["layers"]),
                              f"{r['logits']:.3g}", f"{r['resident_margin']:.3g}",
                              f"{r['argmax'][0]} / {r['argmax'][1]}"])  # fmt: skip
                continue
            what = "vs mlx-lm resident greedy" if case.startswith("plain") else "vs streamed plain"
            first = "—" if r["first_departure"] is None else r["first_departure"]
            body.append([model, case, what, "equal" if r["equal"] else "departs", first])
    heads = ["shape", "run", "compared with", "16 greedy tokens", "first departure"]
    dheads = ["shape", "max |streamed − resident| per layer", "logits", "resident top-2 margin",
              "argmax resident / streamed"]  # fmt: skip
    return (
        md_table(heads, body)
        + "\nAt 100% `--warm`, the prompt in one call:\n\n"
        + md_table(dheads, diffs)
    )


def batches_table() -> str:
    """The reader in decoding's batches against the profile's stream-shaped bench, one machine
    (bench_cuda.py `batches`, then `reads`)."""
    data = json.loads((RESULTS / "batches.json").read_text())
    stream = {
        r["threads"]: r["gbps"]
        for r in data["reads_same_machine"]["paths"]
        if r["name"] == "preadv_direct_arena_gpu_touched"
    }
    body = []
    for size, per_round in data["gbps"].items():
        n = int(size) if size.isdigit() else None
        body.append([size, f"{data['median'][size]:.2f}", ", ".join(f"{g:.2f}" for g in per_round),
                     _f(stream.get(n))])  # fmt: skip
    heads = ["blocks a batch", "GB/s, median", "per round",
             "stream bench at as many threads, GB/s"]  # fmt: skip
    return md_table(heads, body)


def span_table() -> str:
    """The profile's read path over a test file just written against the 16-layer pack read in
    place, whole and within its first 4 GiB, interleaved (bench_cuda.py `span`), one row per
    session, source and reads in flight; then the pack read back to back, 1 GiB a run."""
    body = []
    for sess, path in _session_results("span.json"):
        data = json.loads(path.read_text())
        for key, per_round in data["gbps"].items():
            source, threads = key.rsplit("@", 1)
            body.append([str(sess), source, threads, f"{data['median'][key]:.2f}",
                         ", ".join(f"{g:.2f}" for g in per_round)])  # fmt: skip
        b2b = data["back_to_back_gbps"]
        quarter = max(1, len(b2b) // 4)
        body.append([str(sess), f"pack, {len(b2b)} GiB back to back", "8",
                     f"{statistics.median(b2b):.2f}",
                     f"first {quarter} GiB {statistics.mean(b2b[:quarter]):.2f}, last {quarter} "
                     f"{statistics.mean(b2b[-quarter:]):.2f}; range {min(b2b):.2f}-{max(b2b):.2f}"])  # fmt: skip
    heads = ["session", "blocks read from", "reads in flight", "GB/s, median", "per round"]
    return md_table(heads, body)


# the profile a run of the pinned step is modeled on, by its io: the session's own (measured
# with direct reads) and the same with the pinned step's read rate and landing
PINNED_PROFILES = {"direct": "h100-r14", "pinned": "h100-r14-pinned"}


def pinned_table() -> str:
    """`--io pinned` against `--io direct` on one machine (bench_cuda.py `pinned`): the reader in
    decoding's batches, read and landing apart; then plain decoding, the modes alternating, each
    run modeled on the profile of its io (PINNED_PROFILES)."""
    data = json.loads((RESULTS / "pinned.json").read_text())  # its reads; its runs: runs()
    profs = {io: load_profile(RESULTS / f"{p}.yaml") for io, p in PINNED_PROFILES.items()}
    body = []
    for io, got in data["reads"].items():
        body.append([f"reader, {data['batch']}-block batches", io,
                     _f(statistics.median(got["read_gbps"])),
                     _f(statistics.median(got["read_and_land_gbps"])),
                     _f(statistics.median(got["touch_ms_a_batch"]))] + ["—"] * 5)  # fmt: skip
    rows = runs("pinned")
    for budget in dict.fromkeys(r["budget"] for r in rows):
        first = next(r for r in rows if r["budget"] == budget)
        for io in ("direct", "pinned"):
            mine = [r for r in rows if r["budget"] == budget and r["io"] == io]
            recs = [rec for r in mine for rec in r["records"]]
            n = sum(r["committed"] for r in mine)
            equal = all(first_departure(r["tokens"], first["tokens"]) is None for r in mine)
            body.append([f"plain decode, {budget}", io, _f(_read_gbps(recs)), "—", "—",
                         ", ".join(_f(measured_tps(r)) for r in mine),
                         ", ".join(f"{measured_tps(r) / modeled_tps(r, profs[io]) - 1:+.0%}"
                                   for r in mine),
                         f"{1e3 * sum(x.blocked_s for x in recs) / n:.0f}",
                         f"{1e3 * sum(x.wall_s - x.blocked_s for x in recs) / n:.0f}",
                         "equal" if equal else "differ"])  # fmt: skip
    heads = ["what", "io", "read GB/s", "read and land GB/s", "GPU touch ms a batch",
             "tok/s, each run", "model error, each run (modeled time / measured - 1)", "blocked ms/token",
             "not blocked ms/token", "tokens against the first run"]  # fmt: skip
    return md_table(heads, body) + "\n" + _pinned_spec_table(profs["pinned"])


def _pinned_spec_table(prof) -> str:
    """The fourteenth session's speculative runs on pinned reads (pinned-spec.json: 9 GB, trace
    routing), each against the plain runs on either side of it, beside the same γ and α of the
    session's direct runs."""
    direct = {(r["drafter"], r["gamma"]): r for r in spec_rows() if r.get("session") == 14}
    body = []
    for row in spec_rows(("pinned-spec",)):
        twin = direct.get((row["drafter"], row["gamma"]))
        modeled = modeled_tps(row, prof) / modeled_tps(row["plain"], prof)
        body.append([row["drafter"], row["gamma"], _f(measured_tps(row)), _f(plain_tps(row)),
                     f"{measured_speedup(row):.2f}x", f"{modeled:.2f}x",
                     "—" if twin is None else f"{measured_speedup(twin):.2f}x",
                     _departure(row)])  # fmt: skip
    heads = [
        "drafter",
        "γ",
        "pinned tok/s",
        "pinned plain around it, tok/s",
        "speed-up, pinned",
        f"modeled ({prof.name})",
        "speed-up, direct (spec step)",
        "tokens against plain",
    ]
    return md_table(heads, body)


def offsets_table() -> str:
    """Where MLX's CUDA gather kernels find a slot (bench_cuda.py `offsets`): each case's output
    at slots just below and past 2^31 and 2^32 elements against the expert alone, direct and
    through the arena's copy path."""
    data = json.loads((RESULTS / "offsets.json").read_text())
    body = []
    for case, rows in data.items():
        if not case.startswith("gather_"):
            continue
        for r in rows:
            if "refused" in r:
                direct, copied = f"refused: {r['refused']}", "—"
            else:
                direct, copied = (("equal" if r[k] else "**differs**") for k in
                                  ("direct_equal", "copied_equal"))  # fmt: skip
            name = case.replace("mlx.core.", "")  # the fifth session named dtypes in full
            body.append([name, r["slot"], f"{r['elements_from_start'] / 2**32:.3f}", direct,
                         copied])  # fmt: skip
    heads = ["call", "slot", "slot start / 2^32 elements", "direct on the arena",
             "on the copied experts"]  # fmt: skip
    return md_table(heads, body)


def _session_results(name: str) -> list[tuple[int, Path]]:
    """(session, path) of every sessionN/`name` a later session's step wrote, and of its second
    and later runs in one session (STEP-2.json ...: benchmarks/merge_cuda.py), in order."""
    stem = Path(name).stem
    found = [
        (int(d.name.removeprefix("session")), int(m.group(1) or 1), p)
        for d in RESULTS.glob("session*")
        for p in d.glob(f"{stem}*.json")
        if (m := re.fullmatch(rf"{re.escape(stem)}(?:-(\d+))?\.json", p.name))
    ]
    return [(sess, path) for sess, _, path in sorted(found)]


def _where_runs() -> Iterator[tuple[int, str, dict]]:
    """(session, run name, its `where` result) of every session that ran the step (the sixth's
    in where.json, later ones' in their sessionN/)."""
    for sess, path in [(6, RESULTS / "where.json"), *_session_results("where.json")]:
        for name, v in json.loads(path.read_text()).items():
            if isinstance(v, dict) and "calls" in v:
                yield sess, name, v


def where_table() -> str:
    """Where a pass's time goes (bench_cuda.py `where`, sixth and eleventh sessions): per
    committed token, the run's wall and blocked time, then per MoE layer call summed: the
    router's sync wait, the reads' wall, the layer's own GPU time (its output evaluated at once:
    its fresh blocks land, then its experts compute) and the call's host CPU; and the per-call
    fit of that GPU time on the call's fresh blocks and positions (prefill calls and first-use
    calls left out)."""
    import numpy as np

    body = []
    for sess, name, v in _where_runs():
        calls = v["calls"][v["prefill_calls"] :]
        first = [c for c in calls if c["cpu"] > FIRST_USE_S]
        calls = [c for c in calls if c["cpu"] <= FIRST_USE_S]
        n = v["committed"]
        per = {k: 1e3 * sum(c[k] for c in calls) / n for k in ("router", "reads", "gpu", "cpu")}
        # a call's wall beyond its router sync and its reads: its host path
        own = statistics.mean(c["wall"] - c["router"] - c["reads"] for c in calls)
        x = np.array([[1, c["fresh"], c["positions"]] for c in calls], float)
        fit = np.linalg.lstsq(x, 1e3 * np.array([c["gpu"] for c in calls]), rcond=None)[0]
        body.append([sess, name, n, v["passes"], f"{1e3 * v['wall_s'] / n:.0f}",
                     f"{1e3 * v['blocked_s'] / n:.0f}", f"{per['router']:.1f}",
                     f"{per['reads']:.0f}", f"{per['gpu']:.1f}", f"{per['cpu']:.1f}",
                     f"{sum(c['fresh'] for c in calls) / n:.0f}", f"{1e3 * own:.2f}",
                     f"{fit[0]:.2f} + {fit[1]:.2f}·blocks + {fit[2]:.2f}·positions",
                     ", ".join(f"{c['cpu']:.1f} s" for c in first) or "—"])  # fmt: skip
    heads = ["session", "run", "tokens", "passes", "ms/token", "blocked", "router sync",
             "reads (wall)", "layer GPU", "host CPU", "fresh blocks/token",
             "call wall beyond router and reads, ms a call", "layer GPU ms per call (fit)",
             "first-use calls left out (host CPU)"]  # fmt: skip
    return md_table(heads, body)


def land_table() -> str:
    """The landing bench at 1-32 fresh blocks per layer call (`specdec bench device`, from the
    sixth session), and the device model on those sessions' runs with the curve and with the
    one 16-block figure (`land_gbps`) at every count."""
    profs, body = profiles(), []
    for sess in SESSIONS:
        path = RESULTS / f"profile_details-r{sess}.json"
        curve = json.loads(path.read_text()).get("landing_curve") if path.exists() else None
        if not curve:
            continue
        rows = [r for step in RUN_STEPS for r in runs(step)
                if r.get("session") == sess and not first_use(r)]  # fmt: skip
        errs = {}
        for label, dry in (("curve", False), ("16 blocks", True)):
            on = [(r, replace(profs[own(r)], land_curve=()) if dry else profs[own(r)])
                  for r in rows]  # fmt: skip
            e = [device_tps(r) / modeled_tps(r, p) - 1 for r, p in on]
            o = [device_tps(r) / own_reads_tps(r, p) - 1 for r, p in on]
            errs[label] = _abs_worst(e) + _abs_worst(o)
        ms = " / ".join(f"{c['extra_s'] * 1e3:.1f}" for c in curve)
        gbps = " / ".join(_f(c["gbps"], ".1f") for c in curve)
        for label, cols in errs.items():
            body.append([sess, ms, gbps, len(rows), label, *cols])
    heads = ["session", "landing ms, 1/2/4/8/16/32 blocks a call", "GB/s", "runs",
             "model lands at", "median |error|", "worst", "own reads: median |error|",
             "worst"]  # fmt: skip
    return md_table(heads, body)


def overhead_table() -> str:
    """One row per session and shape: the fourth session's run (overhead.json), the eighth's
    (session8/, its routing then read once a token), the tenth's (session10/: held deferred
    steps and the frozen heap; docs/results/cuda.md says what changed), the eleventh's
    (session11/: 128 tokens, 5 alternations in one process, 4 pairs), the thirteenth's and the
    fifteenth's (3 pairs): every sessionN/overhead.json with fresh-process pairs."""
    body = []
    for path in (RESULTS / "overhead.json", *(p for _, p in _session_results("overhead.json"))):
        data = json.loads(path.read_text())
        for model in ("qwen3", "minimax"):
            if "specdec_tokens_per_s" in data.get(model, {}):  # the twelfth ran no fresh pairs
                body.append([data["session"], *_overhead_row(model, data)])
    heads = ["session", "shape", "MoE layers", "specdec tok/s", "mlx-lm tok/s", "ratio (median)",
             "per pair", "pairs", "added µs per MoE layer", "in one process: one graph per token",
             "started per layer", "warm, one process: ours / mlx-lm", "added µs per MoE layer",
             "our host CPU µs per MoE layer"]  # fmt: skip
    return md_table(heads, body)


def _overhead_row(model: str, data: dict) -> list:
    r, ab = data[model], data["launch_ab"][model]["median"]
    ours, peer = r["specdec_tokens_per_s"]["median"], r["mlx_lm_tokens_per_s"]["median"]
    layers = r["moe_layers"]
    extra = (1 / ours - 1 / peer) / layers * 1e6
    warm = r.get("in_process") or {}  # mlx-lm's generate_step and ours, warm, one process
    host = warm.get("host_us_per_moe_layer", {}).get("full_budget", {})
    return [
        model, layers, f"{ours:.0f}", f"{peer:.0f}", f"{r['ratio']['median']:.2f}x",
        f"{r['ratio']['min']:.2f}-{r['ratio']['max']:.2f}", len(r["ratio"]["all"]),
        f"{extra:.0f}", f"{ab['one graph per token']:.0f}", f"{ab['started per layer']:.0f}",
        _f(warm.get("ratio")), _f(warm.get("added_us_per_moe_layer"), ".0f"),
        _f(host.get("host_cpu"), ".0f"),
    ]  # fmt: skip


def loop_table() -> str:
    """Warm one-process runs at full budget, µs per token (medians of 5 alternations, 128
    tokens): mlx-lm's `generate_step`, the streamed model in that loop, ours (deferred steps of
    16 tokens together, of 64, and, from the twelfth session, with each MoE call's routing read
    on its own: the eleventh session's read), and our loop's parts (specdec.bench.overhead
    `_loop_split`: wall µs a token, its own 3 decodes)."""
    runs = ("resident", "streamed_model_in_mlx_lm_loop", "streamed", "streamed_steps_64_tokens",
            "streamed_routing_per_call")  # fmt: skip
    parts = ("next_forward", "routing_read", "deferred", "records", "rest")
    body = []
    for sess, path in _session_results("overhead.json"):
        data = json.loads(path.read_text())
        for model in ("qwen3", "minimax"):
            ip = data.get(model, {}).get("in_process", {})
            if "loop_us_per_token" not in ip:  # before the eleventh, or the lease ended first
                continue
            us = {k: 1e6 / ip[f"{k}_tokens_per_s"]["median"] if f"{k}_tokens_per_s" in ip
                  else None for k in runs}  # fmt: skip
            lp = ip["loop_us_per_token"]
            split = ", ".join(f"{p} {lp[f'{p}_wall']:.0f}" for p in parts)
            ratios = [us["resident"] / us[k] for k in ("streamed", "streamed_model_in_mlx_lm_loop")]
            rounds = [a / b for a, b in zip(ip["streamed_tokens_per_s"]["all"],
                                            ip["resident_tokens_per_s"]["all"], strict=True)]  # fmt: skip
            per_round = f"{min(rounds):.2f}-{max(rounds):.2f} ({statistics.median(rounds):.2f})"
            body.append([sess, model, ip["moe_layers"], *(_f(v, ".0f") for v in us.values()),
                         f"{ratios[0]:.2f}x", per_round, f"{ratios[1]:.2f}x", split])  # fmt: skip
    heads = ["session", "shape", "MoE layers", "mlx-lm", "streamed model, mlx-lm's loop", "ours",
             "ours, 64 tokens held", "ours, routing read a call", "ours / mlx-lm",
             "per round (median)", "forward alone / mlx-lm",
             "our loop by part (of its own decodes)"]  # fmt: skip
    return md_table(heads, body)


def host_reads_table() -> str:
    """The eighth session's diagnosis: one host read of a small device array, and the decode
    variants that located the full-budget gap (session8/host_reads.json)."""
    data = json.loads((RESULTS / "session8" / "host_reads.json").read_text())
    reads = data["read_us"]
    body = [[f"read: {k}", f"{v:.1f} µs", ""] for k, v in reads.items()]
    base = data["median"]["mlx_lm"]
    for k, v in data["median"].items():
        runs = data["tps"][k]
        body.append([f"decode: {k}", f"{v:.0f} tok/s ({min(runs):.0f}-{max(runs):.0f})",
                     f"{v / base:.2f}x"])  # fmt: skip
    return md_table(["measured", "median", "against mlx-lm"], body)


def decode9_table() -> str:
    """The ninth session's full-budget diagnosis (session9/diag_run1.json): decode variants in
    one process, alternating, against mlx-lm's generate_step on the resident model; then one
    forward's host graph build and its evaluation, and our loop's host parts."""
    data = json.loads((RESULTS / "session9" / "diag_run1.json").read_text())
    body = []
    for shape in ("qwen3", "minimax"):
        med = data[shape]["median"]
        for k, v in med.items():
            body.append([shape, f"decode: {k}", f"{v:.0f} tok/s", f"{v / med['mlx_lm']:.2f}x"])
        for k, v in data[shape]["forward"].items():
            body.append([shape, f"one forward: {k}",
                         f"build {v['build_us']:.0f} µs, eval {v['eval_us']:.0f} µs", ""])  # fmt: skip
        parts = data[shape]["loop_parts_us_per_token"]
        body.append([shape, "our loop, µs a token",
                     ", ".join(f"{k.strip('_')} {v:.0f}" for k, v in parts.items()), ""])  # fmt: skip
    return md_table(["shape", "measured", "median", "against mlx-lm"], body)


def reads_table() -> str:
    """The read bench of the third session's machine at the 16-layer model's block size: into
    a fresh arena, into slots a GPU computation has just read (CUDA managed pages then live on
    the GPU and migrate back under the read), and one block at a time."""
    data = json.loads((RESULTS / "reads.json").read_text())
    rows: dict = {}
    for p in data["paths"]:
        rows.setdefault(p["name"], {})[p["threads"]] = p["gbps"]
    threads = sorted({t for r in rows.values() for t in r})
    base = rows["preadv_direct_arena"]
    body = [[name, *(f"{r[t]:.2f} ({r[t] / base[t]:.2f}x)" for t in threads)]
            for name, r in rows.items()]  # fmt: skip
    heads = ["path (O_DIRECT, page cache bypassed)", *(f"{t} threads, GB/s" for t in threads)]
    return (f"{data['block_bytes']}-byte blocks, {data['bytes_per_run'] >> 20} MiB a run, median "
            f"of {data['rounds']} runs; ratio to the fresh arena\n\n") + md_table(heads, body)  # fmt: skip


def landing(write: bool = False) -> str:
    """land_gbps from the scale runs with the model's own routing: the slope of time not blocked
    on reads per token against bytes read per token (the GPU takes each block just read; the
    microbenchmark `specdec bench device` now has for it came after the device time was spent).
    The runs with the trace's routing, and every speculative run, are left out of the fit: the
    model check on them is out of sample."""
    import numpy as np

    from specdec.clock.profiles import profile_yaml
    from specdec.core.files import write_atomic

    rows = [r for r in runs("scale") if r["routing"] == "model"]
    x = [sum(rec.bytes_read for rec in r["records"]) / r["committed"] for r in rows]
    y = [sum(rec.wall_s - rec.blocked_s for rec in r["records"]) / r["committed"] for r in rows]
    slope, fixed = np.polyfit(np.array(x), np.array(y), 1)
    gbps = float(f"{1 / slope / 1e9:.4g}")
    text = (f"land_gbps {gbps} (slope {slope * 1e9:.3f} ms per MB over {len(rows)} runs, "
            f"intercept {fixed * 1e3:.1f} ms per token)\n")  # fmt: skip
    if write:
        base = load_profile(RESULTS / "h200.yaml")
        from dataclasses import replace

        prof = replace(
            base, name="h200-landing", land_gbps=gbps,
            description=base.description + "; land_gbps fitted (analysis/cuda.py landing)",
            sources={**base.sources, "land_gbps": f"fitted: {text.strip()}: the scale runs with "
                     "the model's own routing (benchmarks/results/cuda/scale.json)"},
        )  # fmt: skip
        header = "h200-landing: h200.yaml with land_gbps, `python -m analysis.cuda landing --write`"
        write_atomic(RESULTS / "h200-landing.yaml", profile_yaml(prof, header))
    return text


def figure() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profs = profiles()
    by: dict = {}
    paired = set()  # panels measured in lockstep (each run beside a plain run of its own)
    priced: dict = {}  # panel -> the profile its modeled curves are on
    for row in _oracle_grid(FIGURE_SESSIONS):
        meas, mod = _speedups(row, profs)
        alpha = float(row["drafter"].split(":")[1])  # the oracle's α: what the sweep set
        panel = (row.get("session", 1), row["budget"])  # one machine and budget a panel
        if "lockstep" in row:
            paired.add(panel)
        priced[panel] = own(row)
        by.setdefault(panel, {}).setdefault(int(row["gamma"]), []).append(
            (alpha, meas, mod[own(row)])
        )
    order = ("120slots", "128slots", "10%", "9GB")  # one token's experts: 120 beside auto
    panels = sorted((p for p in by if len({a for pts in by[p].values() for a, *_ in pts}) > 1),
                    key=lambda p: (p[0], order.index(p[1])))  # fmt: skip
    rows = -(-len(panels) // FIGURE_COLUMNS)  # a session's panels read left to right, in rows
    cols = min(len(panels), FIGURE_COLUMNS)
    fig, grid = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), sharey=True, squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes, panels, strict=False):
        for gamma, pts in sorted(by[panel].items()):
            pts.sort()
            color = f"C{GAMMAS_SHOWN.index(gamma)}"  # one colour a γ in every panel
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "-", color=color, alpha=0.6)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color=color,
                    label=f"γ = {gamma}")  # fmt: skip
        ax.axhline(1.0, color="gray", lw=0.8)
        how = ", in lockstep" if panel in paired else ""
        ax.set_title(f"budget {panel[1]}, session {panel[0]} ({priced[panel]}){how}",
                     fontsize=10)  # fmt: skip
        ax.set_xlabel("oracle acceptance α (as set)")
    for ax in grid[:, 0]:
        ax.set_ylabel("speed-up over plain decoding")
    axes[0].legend(fontsize=8)
    fig.suptitle("H200 (h200-*) and H100 (h100-*), 16-layer MiniMax-M2.5 shape, trace routing, "
                 "direct reads (from session 15: pinned): measured (points), modeled on the "
                 "machine's profile (lines)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))  # the title above the panels
    tmp = FIGURE.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(FIGURE)
    return f"wrote {FIGURE.relative_to(ROOT)}\n"


OFF = "_cudnn_sdpa_off"  # a part run with MLX_CUDA_USE_CUDNN_SDPA=0 (bench_cuda.py `forced`)
FORCED_PAIRS = ("resident_vs_resident", "resident_vs_resident" + OFF, "streamed_vs_streamed",
                "streamed_vs_resident")  # fmt: skip


def forced_table() -> str:
    """bench_cuda.py `forced`: one fixed sequence's logits, bit for bit, run against run, per
    session that ran it (resident: mlx-lm alone; streamed: 24 slots, every layer evicting), with
    cuDNN's attention as MLX chooses it or off; then the attention alone (`attention_table`)."""
    body = []
    for sess, path in _session_results("forced.json"):
        data = json.loads(path.read_text())
        # a pair's setting: "_cudnn_sdpa_off" ran with it off, the unsuffixed resident pair with
        # MLX's default, the streamed pairs as the process had it (on before the twenty-fourth)
        streamed = "off" if data.get("cudnn_sdpa", "1") == "0" else "as MLX chooses"
        for pair in (p for p in FORCED_PAIRS if p in data):  # the off pair from the 24th on
            r = data[pair]
            if pair.endswith(OFF):
                cudnn = "off"
            else:
                cudnn = streamed if pair.startswith("streamed") else "as MLX chooses"
            body.append([sess, _card(data), pair.removesuffix(OFF).replace("_", " "), cudnn,
                         data["tokens"], _first(r), r["steps_differing"], f"{r['largest']:.3g}",
                         r["argmax_differs"]])  # fmt: skip
    heads = ["session", "card", "pair", "cuDNN decode attention", "steps", "first step differing",
             "steps differing", "largest Δ logit (abs)", "steps whose argmax differs"]  # fmt: skip
    return md_table(heads, body) + "\n" + attention_table()


def _card(data: dict) -> str:
    """The card a session's step ran on (its `gpu` entry, name only)."""
    return data["gpu"].split(",")[0]


def _first(r: dict) -> str | int:
    return "never" if r["first_step_differing"] is None else r["first_step_differing"]


def attention_table() -> str:
    """`forced`'s attention alone (mlx-lm's KVCache + scaled_dot_product_attention, seeded
    random inputs): each later run against the first, per dtype, cuDNN's decode path on (as
    MLX chooses) and off (MLX_CUDA_USE_CUDNN_SDPA=0)."""
    body = []
    for sess, path in _session_results("forced.json"):
        data = json.loads(path.read_text())
        for part, cudnn in (
            ("attention_alone", "as MLX chooses"),
            ("attention_alone" + OFF, "off"),
        ):
            if part not in data:
                continue
            a = data[part]
            for dtype in ("bfloat16", "float32"):
                runs = a[dtype]
                body.append([sess, _card(data), dtype, cudnn,
                             a["steps"], ", ".join(str(_first(r)) for r in runs),
                             f"{max(r['largest'] for r in runs):.3g}"])  # fmt: skip
    heads = ["session", "card", "dtype", "cuDNN decode attention", "steps",
             "first step differing, runs 2 and 3 against 1", "largest Δ (abs)"]  # fmt: skip
    return md_table(heads, body)


def attention_speed_table() -> str:
    """bench_cuda.py `attention_speed`: `python -m mlx_lm generate` on the 2-layer MiniMax shape in
    fresh processes with cuDNN's decode attention on (MLX_CUDA_USE_CUDNN_SDPA=1, MLX's default)
    and off (0, specdec's), a round each; the twenty-fourth session's a shell loop in one order."""
    body = []
    for sess, path in _session_results("attention_speed.json"):
        data = json.loads(path.read_text())
        on, off = (data["tokens_per_s"][f"cudnn_sdpa_{v}"] for v in ("1", "0"))
        ratios = data["off_over_on"]
        order = "on first (a shell loop)" if data["command"].startswith("for ") else "alternating"
        body.append([sess, _card(data), data["tokens"], len(ratios), order,
                     ", ".join(f"{r:.0f}" for r in on), ", ".join(f"{r:.0f}" for r in off),
                     ", ".join(f"{r:.2f}" for r in ratios), f"{statistics.median(ratios):.2f}x"])  # fmt: skip
    heads = ["session", "card", "tokens", "rounds", "order in a round", "on: tok/s", "off: tok/s",
             "off / on per round", "median"]  # fmt: skip
    return md_table(heads, body)


def ties_table() -> str:
    """bench_cuda.py `ties`: rows of [T, V] log-probabilities with two exactly equal maxima, each
    row's pick in one call over T rows (a verify pass) against the row alone (one-token
    decoding) and against the lower index (mlx-lm's rule)."""
    body = []
    for sess, path in _session_results("ties.json"):
        data = json.loads(path.read_text())
        for case, c in data["cases"].items():
            vocab, dtype = case.split("/")
            body.append([sess, _card(data), vocab, dtype, data["rows_a_call"],
                         c["rows"], c["as_decoded_alone"], c["lower_index"]])  # fmt: skip
    heads = ["session", "card", "vocabulary", "dtype", "rows a call", "rows", "as decoded alone",
             "lower index"]  # fmt: skip
    return md_table(heads, body)


def first_tokens_table() -> str:
    """bench_cuda.py `first_tokens`: each decode token's wall time at full budget in fresh
    processes, ours, ours in a stream of its own (as mlx-lm's generate_step decodes) and mlx-lm's;
    per side the first decode token's time in each process, the medians over its processes of
    the first tokens' mean (the first held batch on ours), the rest's mean and tok/s, and the
    rest against mlx-lm's."""
    body = []
    for sess, path in _session_results("first_tokens.json"):
        data = json.loads(path.read_text())
        for shape in ("qwen3", "minimax"):
            if shape not in data:
                continue
            peer = data[shape]["mlx_lm"]["rest_ms"]
            for side, label in (("ours", "ours"), ("ours_stream", "ours, own stream"),
                                ("mlx_lm", "mlx-lm")):  # fmt: skip
                m = data[shape][side]
                mine = [r["walls_ms"] for r in data[shape]["runs"] if r["side"] == side]
                lone = ", ".join(f"{w[0]:.1f}" for w in mine)  # the first decode token alone
                body.append([sess, _card(data), shape, label, len(mine), lone, data["first"],
                             f"{m['first_ms']:.2f}", f"{m['rest_ms']:.2f}",
                             f"{m['first_ms'] / m['rest_ms']:.2f}", f"{peer / m['rest_ms']:.2f}x",
                             f"{m['tokens_per_s']:.0f}"])  # fmt: skip
    heads = ["session", "card", "shape", "side", "processes", "first token, ms (each process)",
             "first tokens", "first: ms a token",
             "rest: ms a token", "first / rest", "rest: mlx-lm / it", "tok/s"]  # fmt: skip
    return md_table(heads, body)


def _loop_runs() -> Iterator[tuple[int, str, str, dict]]:
    """(session, card, run, its figures) of every `loop_parts` child: "qwen3", "minimax", "qwen3
    MLX_USE_CUDA_GRAPHS=0", ... (an entry that failed holds its error)."""
    for sess, path in _session_results("loop_parts.json"):
        data = json.loads(path.read_text())
        for run, v in data.items():
            if isinstance(v, dict) and ("error" in v or "moe_layers" in v):
                yield sess, _card(data), run, v


def loop_parts_table() -> str:
    """bench_cuda.py `loop_parts`: our decode loop taken apart beside mlx-lm's on one warm
    full-budget model (specdec.bench.loop_parts names the variants): per variant the median wall
    µs a token over the rounds (their range), its difference from mlx-lm's loop on the same
    streamed model, mlx-lm's resident tok/s against it, and the main thread's CPU µs a token."""
    body = []
    for sess, card, run, v in _loop_runs():
        if "error" in v:
            body.append([sess, card, run, "(failed)", v["error"][:120], "", "", ""])
            continue
        streamed = v.get("mlx_lm_streamed", {}).get("wall_median")
        resident = v.get("mlx_lm_resident", {}).get("wall_median")
        for variant, m in v.items():
            if not (isinstance(m, dict) and "wall_median" in m):
                continue
            wall = m["wall_median"]
            body.append([sess, card, run, variant,
                         f"{wall:.0f} ({min(m['wall_us']):.0f}-{max(m['wall_us']):.0f})",
                         "" if streamed is None else f"{wall - streamed:+.0f}",
                         "" if resident is None else f"{resident / wall:.2f}x",
                         f"{m['cpu_median']:.0f}"])  # fmt: skip
    heads = ["session", "card", "run", "variant", "wall µs a token (range)",
             "µs against mlx-lm's loop, streamed", "tok/s against mlx-lm resident",
             "main-thread CPU µs a token"]  # fmt: skip
    return md_table(heads, body)


def loop_profile_table(top: int = 8) -> str:
    """`loop_parts`' cProfile of our loop and of mlx-lm's on the same streamed model (every
    variant's runs only): each side's `top` functions by own time, µs and calls a token."""
    body = []
    for sess, card, run, v in _loop_runs():
        for side, rows in v.get("profiles", {}).items():
            for r in rows[:top]:
                body.append([sess, card, run, side, r["function"], f"{r['calls']:.2f}",
                             f"{r['own_us']:.0f}"])  # fmt: skip
    heads = ["session", "card", "run", "loop", "function", "calls a token", "own µs a token"]
    return md_table(heads, body)


TABLES = {
    "scale": scale_table,
    "spec": spec_table,
    "lockstep": lockstep_table,
    "copies": copies_table,
    "copies_bench": copies_bench_table,
    "model": model_table,
    "split": split_table,
    "auto": auto_table,
    "auto_phases": auto_phases_table,
    "lookahead": lookahead_table,
    "exact": exact_table,
    "forced": forced_table,
    "attention_speed": attention_speed_table,
    "ties": ties_table,
    "first_tokens": first_tokens_table,
    "loop_parts": loop_parts_table,
    "loop_profile": loop_profile_table,
    "offsets": offsets_table,
    "batches": batches_table,
    "span": span_table,
    "pinned": pinned_table,
    "where": where_table,
    "land": land_table,
    "shm": shm_table,
    "overhead": overhead_table,
    "loop": loop_table,
    "host_reads": host_reads_table,
    "decode9": decode9_table,
    "reads": reads_table,
    "figure": figure,
    "landing": landing,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", choices=list(TABLES))
    p.add_argument("--write", action="store_true", help="landing: write h200-landing.yaml")
    p.add_argument("--sessions", help="spec: only these sessions' runs (e.g. 5, or 1,2,3,4)")
    p.add_argument("--results", type=Path, help="exact: this exact.json (default: results/cuda's)")
    args = p.parse_args(argv)
    if args.table == "landing":
        out = landing(args.write)
    elif args.table == "exact":
        out = exact_table(args.results)
    elif args.table == "spec":
        out = spec_table(tuple(map(int, args.sessions.split(","))) if args.sessions else None)
    else:
        out = TABLES[args.table]()
    print(out, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
