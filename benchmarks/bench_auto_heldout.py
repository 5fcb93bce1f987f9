"""`--gamma auto` on random settings it was not tuned on: never above 1.03x plain, near the best γ.

    nice python benchmarks/bench_auto_heldout.py --settings 100 --seed 2024     # the full set
    nice python benchmarks/bench_auto_heldout.py --settings 12 --seed 2024 --modes replay

Settings drawn by numpy's generator seeded with --seed (drawn once, in order, so a run of the
first N settings is a prefix of the full set): mode (runtime: `specdec generate`'s library
path on the bundled tiny model; replay: specdec.gamma.replay on the tiny model's routing
recorded over the 40 held-out prompts by `specdec trace record tiny --max-tokens 64`, made
once in a temporary directory), held-out prompt (runtime; specdec/data/prompts_heldout.jsonl),
length 32-512 tokens, budget 5-75% of the routed experts, drafter (self, oracle:α with α in
0.3-0.95, lookup, mtp; in replay the oracle's α, the others' drawn the same way, self as main
draft compute), profile (m4-24gb, m5-24gb: auto prices on it). Per setting: plain, auto,
fixed γ 2 and 4; bytes per committed token and modeled seconds per token of each. Checked:
auto / plain <= 1.03 in both, on every setting; where a fixed γ beats plain in both, auto's
time within 1.05x of the best such γ's. Writes benchmarks/results/auto_heldout.json. `--only
I,J,...` re-measures those settings in an existing --out, keeping its other rows (the file's
meta gains a "rerun" entry with the command).

    nice python benchmarks/bench_auto_heldout.py --seed 2024 --explain 91

--explain I: why auto trails a fixed γ on runtime setting I. Its auto run and fixed γ = 2, each
pass's choice (γ, why, E(2), accepted), and the judged first drafts: auto's from its first
draft up to the block of γ > 1 it chose as best and kept (no plain pass after it), against
fixed γ = 2's over the same committed tokens (the text's rate there), with the binomial chance
of auto's count or fewer at that rate, and fixed γ = 2's per 50 committed tokens. Writes
benchmarks/results/auto_heldout_explain_<I>.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from specdec.core.machine import machine_info, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DRAFTERS, PROFILES, MODES = (
    ("self", "oracle", "lookup", "mtp"),
    ("m4-24gb", "m5-24gb"),
    (
        "runtime",
        "replay",
    ),
)
RUNS = ("1", "auto", "2", "4")  # plain first: the reference
WINDOW = 50  # --explain: committed tokens per window of fixed γ = 2's acceptance


def draw(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        drafter = DRAFTERS[rng.integers(len(DRAFTERS))]
        alpha = round(float(rng.uniform(0.3, 0.95)), 2)
        out.append({
            "i": i, "mode": MODES[rng.integers(2)], "prompt": int(rng.integers(40)),
            "tokens": int(rng.integers(32, 513)), "budget": int(rng.integers(5, 76)),
            "drafter": f"oracle:{alpha}" if drafter == "oracle" else drafter, "alpha": alpha,
            "profile": PROFILES[rng.integers(2)],
        })  # fmt: skip
    return out


def _decode(s: dict, gammas: tuple[str, ...]) -> dict:
    """Setting `s` decoded on the bundled model at each of `gammas` in turn ("1": plain, whose
    tokens the oracle of later runs follows), the cache reset before each: γ -> its result."""
    from specdec.clock.profiles import get_profile
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load
    from specdec.trace.prompts import load_prompts

    profile = get_profile(s["profile"])
    sm = load("tiny", budget=f"{s['budget']}%", io="buffered", with_mtp=s["drafter"] == "mtp")
    try:
        prompt = sm.encode(load_prompts("heldout")[s["prompt"]])
        out: dict = {}
        for g in gammas:
            sm.reset_cache()
            drafter = "none" if g == "1" else s["drafter"]
            ref = out["1"].tokens if "1" in out else None  # None: the oracle runs plain first
            out[g] = generate(sm, prompt, drafter, DecodeConfig(g, s["tokens"]), (profile,),
                              stop_at_eos=False, reference=ref)  # fmt: skip
        return out
    finally:
        sm.close()


def runtime(s: dict) -> dict:
    res = _decode(s, RUNS)
    return {
        g: {
            "bytes": r.summary["bytes_per_token"],
            "s": 1.0 / r.summary[f"modeled_tokens_per_s/{s['profile']}"],
            "same": r.tokens == res["1"].tokens,
        }
        for g, r in res.items()
    }


def replay(s: dict, trace_dir: Path) -> dict:
    from specdec.clock.profiles import get_profile
    from specdec.core.errors import BudgetError
    from specdec.gamma.replay import replay_passes, trace_clock
    from specdec.trace.format import load_trace

    trace = load_trace(trace_dir)
    config = (ROOT / "specdec" / "models" / "tiny" / "config.json").read_text()
    draft = "main" if s["drafter"] == "self" else "none"
    clock = trace_clock(json.loads(config), trace, draft)
    slots = max(1, round(s["budget"] / 100 * trace.n_layers * trace.n_experts))
    out = {}
    for g in RUNS:
        try:
            r = replay_passes(trace, "lru", slots, g, s["alpha"], clock,
                              get_profile(s["profile"]), positions=s["tokens"])  # fmt: skip
        except BudgetError:  # a fixed γ whose pass cannot fit the cache
            continue
        out[g] = {"bytes": r.bytes_per_token, "s": 1.0 / r.tokens_per_s, "same": True}
    return out


def explain(s: dict) -> dict:
    """Auto's choices on runtime setting `s` beside fixed γ = 2's acceptance (module doc)."""
    from scipy.stats import binom

    if s["mode"] != "runtime":
        raise SystemExit(f"setting {s['i']} is a replay setting: --explain takes runtime ones")
    runs = {g: r.records for g, r in _decode(s, ("auto", "2")).items()}
    trail, t = [], 0  # auto's passes: committed token at the pass's start
    for r in runs["auto"]:
        c = r.gamma_choice
        e2 = c["candidates"][1]["tokens"] if len(c.get("candidates", ())) > 1 else None
        trail.append({"token": t, "gamma": r.gamma, "why": c.get("why"), "e2": e2,
                      "accepted": r.accepted})  # fmt: skip
        t += r.accepted + 1
    drafts = [p for p in trail if p["gamma"] > 1]
    plain = [i for i, p in enumerate(trail) if p["gamma"] == 1 and p["why"] != "last"]
    after = trail[plain[-1] + 1 :] if plain else trail  # auto drafts on from here
    settled = next((p["token"] for p in after if p["why"] in ("best", "bytes")), t)
    start = drafts[0]["token"] if drafts else t
    auto_n = [p for p in drafts if p["token"] < settled]
    auto_acc = sum(p["accepted"] >= 1 for p in auto_n)
    fixed, t, windows = [0, 0], 0, {}  # windows: fixed γ = 2's per WINDOW committed tokens
    for r in runs["2"]:
        if start <= t < settled:
            fixed[0] += r.accepted >= 1
            fixed[1] += 1
        w = windows.setdefault(t // WINDOW * WINDOW, [0, 0])
        w[0] += r.accepted >= 1
        w[1] += 1
        t += r.accepted + 1
    rate = fixed[0] / fixed[1] if fixed[1] else None
    return {
        "setting": s, "first_draft_token": start, "first_best_draft_token": settled,
        "auto_first_drafts": {"accepted": auto_acc, "judged": len(auto_n)},
        "fixed_2_first_drafts_same_tokens": {"accepted": fixed[0], "judged": fixed[1]},
        "fixed_2_first_drafts_per_window": {str(k): v for k, v in windows.items()},
        "chance_of_auto_count_or_fewer": (
            float(binom.cdf(auto_acc, len(auto_n), rate)) if rate is not None else None
        ),
        "auto_passes": trail,
    }  # fmt: skip


def judge(row: dict) -> dict:
    runs, p = row["runs"], row["runs"]["1"]
    a = runs["auto"]
    row["auto_bytes"] = a["bytes"] / p["bytes"] if p["bytes"] else (1.0 if not a["bytes"] else None)
    row["auto_time"] = a["s"] / p["s"]
    wins = [
        g
        for g in ("2", "4")
        if g in runs and runs[g]["bytes"] < p["bytes"] and runs[g]["s"] < p["s"]
    ]
    row["fixed_wins"] = wins
    row["auto_vs_best_fixed"] = a["s"] / min(runs[g]["s"] for g in wins) if wins else None
    return row


def _summary(rows: list[dict]) -> dict:
    fixed = [r["auto_vs_best_fixed"] for r in rows if r["auto_vs_best_fixed"] is not None]
    return {
        "settings": len(rows),
        "worst_auto_bytes": max(r["auto_bytes"] for r in rows),
        "worst_auto_time": max(r["auto_time"] for r in rows),
        "fixed_wins_settings": len(fixed),
        "auto_within_1.05_of_best_fixed": sum(v <= 1.05 for v in fixed),
        "tokens_equal_plain": all(v["same"] for r in rows for v in r["runs"].values()),
    }


def _write(args, rows: list[dict], t0: float, kept: dict | None) -> dict:
    """The results so far (rewritten after every setting: a cut run keeps what it measured);
    `kept`: with --only, --out as it was without the settings re-measured."""
    meta = {
        "command": args.command,
        "seed": args.seed, "seconds": time.perf_counter() - t0, "machine": machine_info(),
    }  # fmt: skip
    if kept is not None:  # the other rows as the file had them, and its history
        rows = sorted([*kept["rows"], *rows], key=lambda r: r["i"])
        meta = {**kept["meta"], "rerun": [*kept["meta"].get("rerun", []), meta]}
    summary = _summary(rows)
    write_result(args.out, {"meta": meta, "summary": summary, "rows": rows})
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", type=int, default=100)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", type=Path, default=RESULTS / "auto_heldout.json")
    ap.add_argument("--explain", type=int, metavar="I", help="one runtime setting's choices")
    ap.add_argument("--only", metavar="I,J", help="re-measure these settings in --out (kept rows)")
    args = ap.parse_args(argv)
    args.command = "python benchmarks/bench_auto_heldout.py " + " ".join(argv or sys.argv[1:])
    t0 = time.perf_counter()
    if args.explain is not None:
        out = explain(draw(args.explain + 1, args.seed)[args.explain])
        meta = {"command": args.command, "seed": args.seed, "machine": machine_info()}
        write_result(RESULTS / f"auto_heldout_explain_{args.explain}.json", {"meta": meta, **out})
        print(json.dumps({k: v for k, v in out.items() if k != "auto_passes"}))
        return 0
    settings = [s for s in draw(args.settings, args.seed) if s["mode"] in args.modes.split(",")]
    kept = None
    if args.only:  # re-measure these settings in --out, keeping its other rows
        if not args.out.is_file():
            raise SystemExit(f"--only re-measures settings of an existing --out: {args.out} is not")
        only = {int(i) for i in args.only.split(",")}
        settings = [s for s in settings if s["i"] in only]
        kept = json.loads(args.out.read_text())
        kept["rows"] = [r for r in kept["rows"] if r["i"] not in only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="auto-heldout-") as tmp:
        trace_dir = Path(tmp) / "trace"
        if any(s["mode"] == "replay" for s in settings):
            cmd = ["record", "tiny", "--out", str(trace_dir), "--max-tokens", "64"]
            subprocess.run([sys.executable, "-m", "specdec", "trace", *cmd, "--lookahead", ""],
                           check=True, capture_output=True)  # fmt: skip
        for s in settings:
            runs = runtime(s) if s["mode"] == "runtime" else replay(s, trace_dir)
            rows.append(judge({**s, "runs": runs}))
            r = rows[-1]
            print(f"{r['i']} {r['mode']} {r['drafter']} {r['budget']}% {r['tokens']} "
                  f"{r['profile']}: auto/plain bytes {r['auto_bytes']:.3f} time "
                  f"{r['auto_time']:.3f} vs best fixed {r['auto_vs_best_fixed']}",
                  file=sys.stderr, flush=True)  # fmt: skip
            _write(args, rows, t0, kept)
    print(_write(args, rows, t0, kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
