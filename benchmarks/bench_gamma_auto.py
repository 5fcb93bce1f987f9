"""`--gamma auto` against plain decoding and every fixed γ: replay grids and runtime spot checks.

    python benchmarks/bench_gamma_auto.py replay --trace minimax --positions 2000 --jobs 2
    python benchmarks/bench_gamma_auto.py replay --trace tiny --positions 4000 --jobs 2
    python benchmarks/bench_gamma_auto.py runtime            # bundled model, every drafter
    python benchmarks/bench_gamma_auto.py host               # auto's bookkeeping, µs per token
    python benchmarks/bench_gamma_auto.py seeds --profile benchmarks/results/cuda/h100-r19.yaml
    python benchmarks/bench_gamma_auto.py seeds --profile ... --slots 1130 --tokens 256,1024,2048

replay: the trace (`minimax`: the calibrated MiniMax-M2.5 trace, `specdec trace synth --like
minimax-m2.5 --positions N --seed 0`, made in a temporary directory; `tiny`: the bundled model's
routing recorded by `specdec trace record tiny --max-tokens 64`: 40 held-out prompts, their prompt positions included) replayed pass by pass (specdec.gamma.replay)
through LRU at budgets 5/10/25/50% of the routed experts, oracle acceptance 0.3-0.95, draft
compute none (oracle, lookup) and main (self-draft: γ − 1 main forwards over resident experts),
fixed γ 1, 2, 3, 4, 8 and auto; modeled on the m4-24gb profile. A fixed γ whose pass cannot fit
the cache is skipped (recorded as such). Writes benchmarks/results/gamma_auto_<trace>.json.

runtime: `specdec generate`'s library path on the bundled tiny model, 256 tokens (long enough
that auto's guard is not paid from the cold start alone), drafters oracle:0.3, oracle:0.9, self,
mtp, lookup, budgets 5%, 10%, 25% and 50%, γ 1, 2, 4 and auto, modeled on m4-24gb; writes
benchmarks/results/gamma_auto_runtime.json. The table:
`python -m analysis.gamma_auto`.

host: the host time auto's bookkeeping takes (GammaChooser.choose and .observe, Shadows.feed:
the candidates' costs, the guard, plain's shadow and one lane per γ; within the feed, the lanes'
passes alone, Shadows._pass), in µs per committed token,
timed around those calls (wrapped for this run only): the bundled model at runtime (25%,
oracle:0.9, 256 tokens), the MiniMax trace in replay (2000 positions, 25%, α 0.9) and the CUDA
sessions' 16-layer pack in replay (9 GB, α 1.0, 2048 tokens, as the twenty-third session ran
it; `--tokens`, `--profile`, `--rounds` for another session's, `--pack-only` for it alone), beside
the whole run's host time per token. Plain and fixed-γ runs never make these calls
(a plain LRU's shadows count on specdec.cache.counting_lru). Writes
benchmarks/results/gamma_auto_host.json (or `--out`).

seeds: the CUDA sessions' `auto` step in replay, over 50 seeds of the oracle's acceptance draws:
one measured run there is one draw. The same routing (the calibrated MiniMax trace's first 16
layers, what `--routing trace` gives the 16-layer pack), 120 slots (about one token's experts),
LRU, γ = 1, 4 and auto, α 1.0 / 0.9 / 0.8 over 96 and 192 tokens, priced on `--profile` (a
session's, e.g. benchmarks/results/cuda/h100-r19.yaml). Per seed auto / γ = 4 in modeled
seconds, the pass auto first drafted and its re-syncs to plain's cache; per setting the ratio's
median, range and how many seeds are within 1.05x, the first draft's median. Writes
benchmarks/results/gamma_auto_seeds.json; with `--slots N` (another budget, e.g. the sessions'
10% and 9 GB: 409 and 1130) gamma_auto_seeds_Nslots.json; `--tokens`, `--alphas` and `--runs`
set the lengths, acceptances and seeds; `--out` writes elsewhere (a diagnostic run, not over
the kept file) (the table: `python -m analysis.auto_seeds --results FILE...`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.clock.profiles import DEFAULT_PROFILE  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.core.progress import progress  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BUDGETS = (0.05, 0.10, 0.25, 0.50)  # of the routed experts
ALPHAS = (0.3, 0.5, 0.7, 0.9, 0.95)
GAMMAS = (1, 2, 3, 4, 8, "auto")
PROFILE = DEFAULT_PROFILE  # what auto prices passes on by default
DEVICE_PROFILE = RESULTS / "cuda" / "h100-r21.yaml"  # what the twenty-third session priced on
DEVICE_POSITIONS = 4000  # the 16-layer pack's trace: the longest run it replays


def _config(trace_name: str) -> dict:
    if trace_name == "minimax":
        from specdec.clock.check import MINIMAX_M25

        return MINIMAX_M25
    return json.loads((ROOT / "specdec" / "models" / "tiny" / "config.json").read_text())


def _write(
    name: str, rows: list[dict], places: dict | None = None, profile: str = PROFILE,
    out: Path | None = None,
) -> int:  # fmt: skip
    """benchmarks/results/gamma_auto_<name>.json (or `out`): the rows, the command, the machine
    (versions and load the numbers came from); `places`: scratch paths to name by placeholder."""
    out = out or RESULTS / f"gamma_auto_{name}.json"
    meta = {"profile": profile, "policy": "lru", "command": " ".join(sys.argv)}
    meta["machine"] = machine_info()
    write_result(out, {"meta": meta, "rows": rows}, places)
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


def _one(job: tuple) -> dict:
    trace_dir, trace_name, positions, frac, alpha, draft, gamma = job
    from specdec.clock.profiles import get_profile
    from specdec.core.errors import BudgetError
    from specdec.gamma.replay import replay_passes, trace_clock
    from specdec.trace.format import load_trace

    trace = load_trace(trace_dir)
    slots = max(1, round(frac * trace.n_layers * trace.n_experts))
    row = {"trace": trace_name, "budget": frac, "slots": slots, "alpha": alpha}
    row |= {"draft_compute": draft, "gamma": str(gamma), "positions": positions}
    clock = trace_clock(_config(trace_name), trace, draft)
    try:
        r = replay_passes(trace, "lru", slots, gamma, alpha, clock, get_profile(PROFILE),
                          positions=positions)  # fmt: skip
    except BudgetError as e:
        return row | {"skipped": str(e)}
    why: dict[str, int] = {}
    for c in r.choices:
        why[c["why"]] = why.get(c["why"], 0) + 1
    return row | {
        "bytes_per_token": r.bytes_per_token,
        "tokens_per_s": r.tokens_per_s,
        "hit_rate": r.hits / max(r.accesses, 1),
        "committed": r.committed,
        "passes": r.passes,
        "gamma_hist": r.gamma_hist,
        "why": why,
    }


def _synth_minimax(trace_dir: Path, positions: int) -> None:
    """The calibrated MiniMax-M2.5 trace (`specdec trace synth`, seed 0) written to trace_dir."""
    cmd = ["synth", str(trace_dir), "--like", "minimax-m2.5", "--positions", str(positions)]
    subprocess.run([sys.executable, "-m", "specdec", "trace", *cmd, "--seed", "0"], check=True)


def _minimax_trace(positions: int):
    """That trace in memory (made in a temporary directory)."""
    from specdec.trace.format import load_trace

    with tempfile.TemporaryDirectory(prefix="gamma-auto-") as tmp:
        _synth_minimax(Path(tmp) / "trace", positions)
        return load_trace(Path(tmp) / "trace")


def replay(args) -> int:
    with tempfile.TemporaryDirectory(prefix="gamma-auto-") as tmp:
        trace_dir = args.trace_dir or Path(tmp) / "trace"
        made = bool(args.trace_dir)  # a trace the same command made before
        if not made and args.trace == "minimax":
            _synth_minimax(trace_dir, args.positions)
        elif not made:
            cmd = ["record", "tiny", "--out", str(trace_dir), "--max-tokens", "64"]
            cmd += ["--lookahead", ""]
            subprocess.run([sys.executable, "-m", "specdec", "trace", *cmd], check=True)
        drafts = ("none",) if args.trace == "minimax" else ("none", "main")
        jobs = [
            (str(trace_dir), args.trace, args.positions, b, a, d, g)
            for d in drafts
            for b in BUDGETS
            for a in ALPHAS
            for g in GAMMAS
        ]
        rows = []
        with ProcessPoolExecutor(args.jobs) as pool:
            for row in pool.map(_one, jobs):
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "why"}), flush=True)
    trace_dir = {args.trace_dir: "TRACE_DIR"} if args.trace_dir else {}
    return _write(args.trace, rows, trace_dir)


def runtime(args) -> int:
    from specdec.clock.profiles import get_profile
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    profile = get_profile(PROFILE)
    rows = []
    bar = progress(total=4 * 5 * 4, desc="bench_gamma_auto", unit="run")
    for budget in ("5%", "10%", "25%", "50%"):
        for drafter in ("oracle:0.3", "oracle:0.9", "self", "mtp", "lookup"):
            sm = load("tiny", budget=budget, with_mtp=drafter == "mtp")
            prompt = sm.encode(args.prompt)
            for g in ("1", "2", "4", "auto"):
                sm.reset_cache()
                cfg = DecodeConfig(gamma=g, max_tokens=args.tokens)
                res = generate(sm, prompt, drafter, cfg, (profile,), stop_at_eos=False)
                s = res.summary
                rows.append({
                    "budget": budget, "drafter": drafter, "gamma": g,
                    "bytes_per_token": s["bytes_per_token"],
                    "tokens_per_s": s[f"modeled_tokens_per_s/{PROFILE}"],
                    "acceptance": s["acceptance"], "tokens": res.tokens,
                    "gamma_hist": s.get("gamma_chosen_hist"),
                })  # fmt: skip
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "tokens"}))
                bar.update()
            sm.close()
    bar.close()
    return _write("runtime", rows)


@contextlib.contextmanager
def timed(spent: dict[str, float]):
    """Time auto's bookkeeping calls into `spent` (seconds by call) while inside."""
    from specdec.gamma.chooser import GammaChooser
    from specdec.gamma.shadows import Shadows

    # Shadows._pass (a lane's pass) runs inside Shadows.feed: its share, not a part beside it
    calls = [(GammaChooser, "choose"), (GammaChooser, "observe"), (Shadows, "feed"),
             (Shadows, "_pass")]  # fmt: skip
    saved = [getattr(cls, name) for cls, name in calls]

    def wrap(fn, key):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0

        return run

    for (cls, name), fn in zip(calls, saved, strict=True):
        setattr(cls, name, wrap(fn, f"{cls.__name__}.{name}"))
    try:
        yield
    finally:
        for (cls, name), fn in zip(calls, saved, strict=True):
            setattr(cls, name, fn)


def host(args) -> int:
    from specdec.clock.check import MINIMAX_M25
    from specdec.clock.profiles import get_profile, load_profile
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.gamma.replay import trace_clock
    from specdec.stream.loader import load

    profile = get_profile(PROFILE)
    rows = []
    if not args.pack_only:
        sm = load("tiny", budget="25%")
        prompt = sm.encode("def fibonacci(n):")
        rows.append(_timed_row("runtime tiny 25% oracle:0.9", lambda: len(generate(
            sm, prompt, "oracle:0.9", DecodeConfig(gamma="auto", max_tokens=256), (profile,),
            stop_at_eos=False).tokens)))  # fmt: skip
        sm.close()
        trace = _minimax_trace(2000)
        clock = trace_clock(MINIMAX_M25, trace)
        slots = round(0.25 * trace.n_layers * trace.n_experts)
        for gamma in (1, "auto"):
            rows.append(_timed_replay(f"replay minimax 25% α 0.9 γ {gamma}",
                                      trace, slots, gamma, 0.9, clock, profile))  # fmt: skip
    # the CUDA sessions' `auto` step in replay: the 16-layer pack at 9 GB (1130 slots), α 1.0,
    # by default 2048 tokens priced on the twenty-first session's profile, as the twenty-third
    # ran it; rounds alternate plain and auto
    trace, clock = _device_trace()
    device = load_profile(args.profile)
    name = f"replay 16-layer pack 9 GB α 1.0 {args.tokens} tokens on {device.name}"
    for _ in range(args.rounds):
        for gamma in (1, "auto"):
            rows.append(_timed_replay(f"{name} γ {gamma}", trace, 1130, gamma, 1.0, clock,
                                      device, args.tokens))  # fmt: skip
    for row in rows:
        print(json.dumps(row))
    return _write("host", rows, out=args.out)


def _timed_replay(name: str, trace, slots: int, gamma, alpha: float, clock, profile,
                  positions: int | None = None) -> dict:  # fmt: skip
    """_timed_row of one LRU replay."""
    from specdec.gamma.replay import replay_passes

    return _timed_row(name, lambda: replay_passes(trace, "lru", slots, gamma, alpha, clock,
                                                  profile, positions=positions).committed)  # fmt: skip


def _timed_row(name: str, run: Callable[[], int]) -> dict:
    """`run` (returning the tokens it committed) timed: host time per committed token, and auto's
    bookkeeping's within it (`timed`)."""
    spent: dict[str, float] = {}
    t0 = time.perf_counter()
    with timed(spent):
        n = run()
    wall = time.perf_counter() - t0
    return {"run": name, "tokens": n, "wall_us_per_token": 1e6 * wall / n} | {
        f"{k}_us_per_token": 1e6 * v / n for k, v in spent.items()
    }


SEED_LAYERS, SEED_SLOTS, SEED_RUNS = 16, 120, 50  # the CUDA `auto` step's model, budget
SEED_ALPHAS, SEED_TOKENS = "1.0,0.9,0.8", "96,192"


def _device_trace():
    """(trace, clock) of the CUDA sessions' 16-layer pack under `--routing trace`: the
    calibrated MiniMax trace's first 16 layers (the model's layer i takes the trace's i)."""
    import dataclasses

    from specdec.clock.check import MINIMAX_M25
    from specdec.gamma.replay import trace_clock

    full = _minimax_trace(DEVICE_POSITIONS)
    trace = dataclasses.replace(
        full, experts=full.experts[:, :SEED_LAYERS], expert_bytes=full.expert_bytes[:SEED_LAYERS]
    )
    return trace, trace_clock({**MINIMAX_M25, "num_hidden_layers": SEED_LAYERS}, trace)


def seeds(args) -> int:
    """auto / γ = 4 over oracle seeds in replay, at the CUDA `auto` step's setting (or the
    slots, lengths and acceptances given)."""
    import statistics

    from specdec.clock.profiles import load_profile
    from specdec.gamma.replay import replay_passes

    profile = load_profile(args.profile)
    trace, clock = _device_trace()
    rows = []
    for alpha in map(float, args.alphas.split(",")):
        for tokens in map(int, args.tokens.split(",")):
            ratios = []
            for seed in range(args.runs):
                runs = {
                    g: replay_passes(
                        trace,
                        "lru",
                        args.slots,
                        g,
                        alpha,
                        clock,
                        profile,
                        seed=seed,
                        positions=tokens,
                    )  # fmt: skip
                    for g in (1, 4, "auto")
                }
                rate = {g: r.tokens_per_s for g, r in runs.items()}
                chosen = [c["gamma"] for c in runs["auto"].choices]
                ratios.append({
                    "auto_over_4": rate["auto"] / rate[4],
                    "4_over_plain": rate[4] / rate[1],
                    "auto_over_plain": rate["auto"] / rate[1],
                    # the first pass auto drafted (None: never) and its re-syncs to plain's cache
                    "first_draft": next((i for i, g in enumerate(chosen) if g > 1), None),
                    "resyncs": sum(1 for c in runs["auto"].choices if c.get("sync")),
                })  # fmt: skip
            a = [r["auto_over_4"] for r in ratios]
            firsts = [r["first_draft"] for r in ratios if r["first_draft"] is not None]
            row = {"alpha": alpha, "tokens": tokens, "slots": args.slots, "seeds": args.runs}
            row |= {"auto_over_4_median": statistics.median(a), "min": min(a), "max": max(a)}
            row |= {"first_draft_median": statistics.median(firsts) if firsts else None}
            row |= {"resyncs": sum(r["resyncs"] for r in ratios)}
            row |= {"within_1.05": sum(x >= 1 / 1.05 for x in a), "per_seed": ratios}
            for key in ("4_over_plain", "auto_over_plain"):
                row[f"{key}_median"] = statistics.median(r[key] for r in ratios)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "per_seed"}), flush=True)
    name = "seeds" if args.slots == SEED_SLOTS else f"seeds_{args.slots}slots"
    return _write(name, rows, profile=str(args.profile), out=args.out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--trace", choices=["minimax", "tiny"], default="minimax")
    r.add_argument("--positions", type=int, default=1000)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--trace-dir", type=Path, help="use this trace instead of making one")
    t = sub.add_parser("runtime")
    t.add_argument("--tokens", type=int, default=256)
    t.add_argument("--prompt", default="def fibonacci(n):")
    h = sub.add_parser("host")
    h.add_argument("--tokens", type=int, default=2048, help="the 16-layer pack's run length")
    h.add_argument("--profile", type=Path, default=DEVICE_PROFILE,
                   help="the 16-layer pack's runs priced on this profile")  # fmt: skip
    h.add_argument("--rounds", type=int, default=1, help="the 16-layer pack's runs, each γ")
    h.add_argument("--pack-only", action="store_true", help="only the 16-layer pack's runs")
    h.add_argument("--out", type=Path, help="write here (default: results/gamma_auto_host.json)")
    d = sub.add_parser("seeds")
    d.add_argument("--profile", type=Path, required=True, help="a CUDA session's device profile")
    d.add_argument("--slots", type=int, default=SEED_SLOTS, help="the cache's slots (default: 120)")
    d.add_argument("--tokens", default=SEED_TOKENS, help="run lengths, comma-separated")
    d.add_argument("--alphas", default=SEED_ALPHAS, help="oracle acceptances, comma-separated")
    d.add_argument("--runs", type=int, default=SEED_RUNS, help="oracle seeds per setting")
    d.add_argument("--out", type=Path, help="write here (a diagnostic run: not over the kept file)")
    args = p.parse_args()
    if args.what == "host" and not 1 <= args.tokens <= DEVICE_POSITIONS:
        p.error(f"--tokens {args.tokens}: the 16-layer pack's trace replays 1-{DEVICE_POSITIONS}")
    return {"replay": replay, "runtime": runtime, "host": host, "seeds": seeds}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
