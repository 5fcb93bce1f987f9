"""Host cost of the speculation-aware options on the runtime path: per verify pass, per layer.

    python benchmarks/bench_verdict.py               # writes benchmarks/results/verdict.json
    python benchmarks/bench_verdict.py --positions 300 --repeats 3   # quick look

A 62 x 256 x top-8 synthetic trace (MiniMax's shape) replayed in verify passes of γ = 4 at
α = 0.8 through ExpertCache exactly as the streamer and decode loop drive it: per MoE layer
`note` (options only) and `access`, per pass `tick` and `verdict`. Each policy (plain LRU and
the options on LRU, at 10% of the experts) runs over the same passes, interleaved, --repeats
times after an untimed warm-up round; the extra host time of an option is its median minus plain LRU's, per pass and per layer
(ExpertCache's step itself is in both). Wall time of this process on a shared machine: medians.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.cache.spec import PolicySpec  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.sim.replay import access_sequence  # noqa: E402
from specdec.trace.synthetic import synthetic_trace  # noqa: E402

POLICIES = ("lru", "lru+demote", "lru+protect", "lru+demote+protect")


def one_run(policy: str, acc, n_slots: int, E: int, L: int) -> float:
    """Seconds to drive every pass of `acc` through a fresh cache as the runtime does."""
    cache = PolicySpec.parse(policy).cache(n_slots)
    keys, ptr = acc.keys.tolist(), acc.ptr.tolist()
    # the streamer's routing per call: [1, γ, k] experts of the layer (made before timing)
    calls = [
        [(layer * E, acc.routes[p, :live, layer][None] - layer * E) for layer in range(L)]
        for p, (_, live, _) in enumerate(acc.plan.tolist())
    ]
    t0 = time.perf_counter()
    for p, (_, live, accepted) in enumerate(acc.plan.tolist()):
        for layer, (base, idx) in enumerate(calls[p]):
            if cache.noting:
                cache.note(base, idx)
            s = p * L + layer
            cache.access(keys[ptr[s] : ptr[s + 1]])
        cache.tick(live)
        cache.verdict(accepted)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/verdict.json")
    args = ap.parse_args(argv)
    L, E, k = 62, 256, 8
    trace = synthetic_trace(args.positions, n_layers=L, n_experts=E, top_k=k, seed=0)
    acc = access_sequence(trace, gamma=4, alpha=0.8, seed=0)
    n = round(0.10 * L * E)
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    for p in POLICIES:  # warm-up, untimed: numpy's set routines load lazily on first use
        one_run(p, access_sequence(trace, 4, 0.8, 0, positions=20), n, E, L)
    for _ in range(args.repeats):  # interleaved: each round runs every policy once
        for p in POLICIES:
            times[p].append(one_run(p, acc, n, E, L))
    med = {p: sorted(t)[len(t) // 2] for p, t in times.items()}
    rows = {
        p: {
            "median_s": med[p],
            "us_per_pass": med[p] / acc.passes * 1e6,
            "extra_us_per_pass": (med[p] - med["lru"]) / acc.passes * 1e6,
            "extra_us_per_layer_per_pass": (med[p] - med["lru"]) / acc.passes / L * 1e6,
        }
        for p in POLICIES
    }
    result = {"passes": acc.passes, "layers": L, "slots": n, "gamma": 4, "alpha": 0.8}
    result |= {"policies": rows, "command": " ".join(sys.argv), "machine": machine_info()}
    write_result(Path(args.out), result)
    for p, r in rows.items():
        print(
            f"{p:<20} {r['us_per_pass']:8.0f} µs/pass, extra {r['extra_us_per_pass']:7.0f} "
            f"µs/pass = {r['extra_us_per_layer_per_pass']:5.1f} µs per layer"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
