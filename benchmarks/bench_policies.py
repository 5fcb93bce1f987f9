"""Speed of the cache layer: policy replays, runtime step overhead, one-pass LRU curve.

    python benchmarks/bench_policies.py            # writes benchmarks/results/policies.json
    python benchmarks/bench_policies.py --positions 1000 --repeats 1   # quick look

A synthetic trace shaped like a real one (16 MoE layers x 64 experts x top-8, skewed per-layer
popularity, 35% of a position's experts reused by the next) is replayed through ExpertCache by
every policy, exactly as `specdec simulate` does. Targets: >= 2 million expert accesses/s per
policy, and the one-pass LRU curve over 64 budgets >= 5x faster than 64 replays (whose hits it
must equal). Times are the best of --repeats runs (the machine is shared; the best run is the
least disturbed one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.cache.bounds import Belady, lru_curve_steps  # noqa: E402
from specdec.cache.expert_cache import ExpertCache  # noqa: E402
from specdec.cache.policies import POLICIES, make_policy  # noqa: E402
from specdec.cache.simulate import replay, trace_steps  # noqa: E402
from specdec.machine import machine_info  # noqa: E402
from specdec.store.files import durable_replace  # noqa: E402
from specdec.trace.format import hotlist_keys, profile_hotlist  # noqa: E402
from specdec.trace.synthetic import synthetic_trace  # noqa: E402

TARGET_ACCESSES_PER_S = 2e6
TARGET_CURVE_SPEEDUP = 5.0


def best_time(fn, repeats: int) -> tuple[float, float, object]:
    """(best wall seconds, best CPU seconds of this process, fn's result). CPU time is what
    other processes on a shared machine disturb least; both are reported."""
    wall = cpu = float("inf")
    out = None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        cpu = min(cpu, time.process_time() - c)
        wall = min(wall, time.perf_counter() - t)
    return wall, cpu, out


def bench_replays(steps, flat, hot, budgets, repeats) -> list[dict]:
    accesses = sum(map(len, flat))
    rows = []
    for name in (*POLICIES, "belady"):
        for n in budgets:

            def run(name=name, n=n):
                pol = (
                    Belady(n, flat)
                    if name == "belady"
                    else make_policy(name, n, hotlist=hot, scratch=8)
                )
                cache = ExpertCache(n, pol)
                cache.preload()
                replay(cache, steps)
                return cache

            wall, cpu, cache = best_time(run, repeats)
            rows.append(
                {
                    "policy": name,
                    "budget_slots": n,
                    "accesses": accesses,
                    "hit_rate": round(cache.hits / accesses, 4),
                    "accesses_per_s_wall": round(accesses / wall),
                    "accesses_per_s_cpu": round(accesses / cpu),
                    "meets_target_wall": accesses / wall >= TARGET_ACCESSES_PER_S,
                    "meets_target_cpu": accesses / cpu >= TARGET_ACCESSES_PER_S,
                }
            )
            print(
                f"replay {name:8} {n:5} slots {accesses / wall / 1e6:6.2f} M accesses/s wall, "
                f"{accesses / cpu / 1e6:6.2f} cpu"
            )
    return rows


def bench_step_overhead(trace, repeats) -> list[dict]:
    """µs per ExpertCache.step (numpy in, StepResult out): the runtime's per-layer cost."""
    keys = trace.keys()  # [T, L, k]
    rows = []
    for width_positions in (1, 8):  # plain decoding; a verify pass of γ = 8
        steps = []
        for t in range(0, keys.shape[0] - width_positions, width_positions):
            for layer in range(keys.shape[1]):
                s, c = np.unique(keys[t : t + width_positions, layer], return_counts=True)
                steps.append((s, c))  # [|S|], [|S|]
        mean_width = float(np.mean([len(s) for s, _ in steps]))
        for name in ("lru", "hotness"):

            def run(name=name, steps=steps):
                cache = ExpertCache(512, make_policy(name, 512))
                step = cache.step
                for s, c in steps:
                    step(s, c)

            wall, cpu, _ = best_time(run, repeats)
            rows.append(
                {
                    "policy": name,
                    "positions_per_step": width_positions,
                    "mean_keys_per_step": round(mean_width, 1),
                    "us_per_step_wall": round(wall / len(steps) * 1e6, 2),
                    "us_per_step_cpu": round(cpu / len(steps) * 1e6, 2),
                }
            )
            print(f"step() {name:8} |S|~{mean_width:5.1f}: {cpu / len(steps) * 1e6:6.2f} us cpu")
    return rows


def bench_curve(flat, n_budgets, repeats) -> dict:
    budgets = np.linspace(8, 1024, n_budgets).astype(int).tolist()
    _, one_pass, curve = best_time(lambda: lru_curve_steps(flat, budgets), repeats)

    def replays():
        hits = []
        for n in budgets:
            cache = ExpertCache(n, make_policy("lru", n))
            replay(cache, [[ks] for ks in flat])
            hits.append(cache.hits)
        return hits

    _, many, hits = best_time(replays, 1)
    equal = curve.tolist() == hits
    print(f"curve: one pass {one_pass:.2f} s, {n_budgets} replays {many:.2f} s cpu, equal={equal}")
    return {
        "budgets": n_budgets,
        "one_pass_cpu_s": round(one_pass, 3),
        "replays_cpu_s": round(many, 3),
        "speedup": round(many / one_pass, 1),
        "equal_hits": equal,
        "meets_target": equal and many / one_pass >= TARGET_CURVE_SPEEDUP,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "policies.json"))
    args = ap.parse_args()
    trace = synthetic_trace(args.positions, n_layers=16, n_experts=64, top_k=8, seed=0)
    steps = trace_steps(trace)
    flat = [ks for position in steps for ks in position]
    hot = hotlist_keys(trace, profile_hotlist(trace))
    result = {
        "machine": machine_info(),
        "trace": {"positions": args.positions, "layers": 16, "experts": 64, "top_k": 8},
        "targets": {
            "accesses_per_s": TARGET_ACCESSES_PER_S,
            "curve_speedup": TARGET_CURVE_SPEEDUP,
        },
        "replay": bench_replays(steps, flat, hot, (256, 512), args.repeats),
        "step_overhead": bench_step_overhead(trace, args.repeats),
        "lru_curve": bench_curve(flat, 64, args.repeats),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "command": " ".join(["python", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    durable_replace(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
