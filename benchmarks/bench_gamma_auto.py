"""`--gamma auto` against plain decoding and every fixed γ: replay grids and runtime spot checks.

    python benchmarks/bench_gamma_auto.py replay --trace minimax --positions 1000 --jobs 2
    python benchmarks/bench_gamma_auto.py replay --trace tiny --positions 4000 --jobs 2
    python benchmarks/bench_gamma_auto.py runtime            # bundled model, every drafter

replay: the trace (`minimax`: the calibrated MiniMax-M2.5 trace, `specdec trace synth --like
minimax-m2.5 --positions N --seed 0`, made in a temporary directory; `tiny`: the bundled model's
routing recorded by `specdec trace record tiny --max-tokens 64`: 40 held-out prompts, their prompt positions included) replayed pass by pass (specdec.cache.adaptive)
through LRU at budgets 5/10/25/50% of the routed experts, oracle acceptance 0.3-0.95, draft
compute none (oracle, lookup) and main (self-draft: γ − 1 main forwards over resident experts),
fixed γ 1, 2, 3, 4, 8 and auto; modeled on the m4-24gb profile. A fixed γ whose pass cannot fit
the cache is skipped (recorded as such). Writes benchmarks/results/gamma_auto_<trace>.json.

runtime: `specdec generate`'s library path on the bundled tiny model, 128 tokens, drafters
oracle:0.3, oracle:0.9, self, mtp, lookup, budgets 10%, 25% and 50%, γ 1, 2, 4 and auto, modeled on
m4-24gb; writes benchmarks/results/gamma_auto_runtime.json. The table:
`python -m analysis.gamma_auto`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.host.machine import write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BUDGETS = (0.05, 0.10, 0.25, 0.50)  # of the routed experts
ALPHAS = (0.3, 0.5, 0.7, 0.9, 0.95)
GAMMAS = (1, 2, 3, 4, 8, "auto")
PROFILE = "m4-24gb"


def _config(trace_name: str) -> dict:
    if trace_name == "minimax":
        from specdec.clock.check import MINIMAX_M25

        return MINIMAX_M25
    return json.loads((ROOT / "specdec" / "models" / "tiny" / "config.json").read_text())


def _one(job: tuple) -> dict:
    trace_dir, trace_name, positions, frac, alpha, draft, gamma = job
    from specdec.cache.adaptive import replay_passes, trace_clock
    from specdec.clock.profiles import get_profile
    from specdec.errors import BudgetError
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


def replay(args) -> int:
    with tempfile.TemporaryDirectory(prefix="gamma-auto-") as tmp:
        trace_dir = args.trace_dir or Path(tmp) / "trace"
        if args.trace == "minimax":
            cmd = ["synth", str(trace_dir), "--like", "minimax-m2.5"]
            cmd += ["--positions", str(args.positions), "--seed", "0"]
        else:
            cmd = ["record", "tiny", "--out", str(trace_dir), "--max-tokens", "64"]
            cmd += ["--lookahead", ""]
        if not args.trace_dir:  # else a trace the same command made before
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
    out = RESULTS / f"gamma_auto_{args.trace}.json"
    meta = {"profile": PROFILE, "policy": "lru", "command": " ".join(sys.argv)}
    trace_dir = {args.trace_dir: "TRACE_DIR"} if args.trace_dir else {}
    write_result(out, {"meta": meta, "rows": rows}, trace_dir)
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


def runtime(args) -> int:
    from specdec.clock.profiles import get_profile
    from specdec.decode.gamma import parse_gamma
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.model.loader import load

    profile = get_profile(PROFILE)
    rows = []
    for budget in ("10%", "25%", "50%"):
        for drafter in ("oracle:0.3", "oracle:0.9", "self", "mtp", "lookup"):
            sm = load("tiny", budget=budget, with_mtp=drafter == "mtp")
            prompt = sm.encode(args.prompt)
            for g in ("1", "2", "4", "auto"):
                sm.reset_cache()
                cfg = DecodeConfig(gamma=parse_gamma(g), max_tokens=args.tokens)
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
            sm.close()
    out = RESULTS / "gamma_auto_runtime.json"
    meta = {"profile": PROFILE, "policy": "lru", "command": " ".join(sys.argv)}
    write_result(out, {"meta": meta, "rows": rows})
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--trace", choices=["minimax", "tiny"], default="minimax")
    r.add_argument("--positions", type=int, default=1000)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--trace-dir", type=Path, help="use this trace instead of making one")
    t = sub.add_parser("runtime")
    t.add_argument("--tokens", type=int, default=128)
    t.add_argument("--prompt", default="def fibonacci(n):")
    args = p.parse_args()
    return replay(args) if args.what == "replay" else runtime(args)


if __name__ == "__main__":
    sys.exit(main())
