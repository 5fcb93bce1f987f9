"""Cost of the non-finite-logit check on greedy decoding: writes benchmarks/results/nan_check.json.

Run from the repo root: `python benchmarks/bench_nan_check.py [--tokens 128] [--pairs 5]`.
Greedy decoding of the bundled tiny model at budget 100% (every expert resident, so the loop
is pure compute and the check's share is largest), in one process, interleaving runs with the
check (the loop as shipped: the chosen token's logit read with it, specdec.decode.loop) and
without (the loop's former `greedy_next`, for comparison only). Reports ms per token, median
and range over the pairs, and the fastest runs' ratio; other work on the cores distorts
single runs, hence the pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from specdec.core.blas import ensure_fast_blas  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.decode import loop  # noqa: E402
from specdec.decode.drafters import DrafterSpec  # noqa: E402
from specdec.stream.loader import load  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def unchecked_next(st, token):
    """The argmax alone (the loop before the check), returned in the shape the loop expects."""
    loop.begin_routing(st, 1)
    logits = st.sm.model(token, cache=st.cache)  # [1, 1, V]
    nxt = mx.argmax(logits[0, -1].astype(mx.float32)).reshape(1, 1)
    mx.async_eval(nxt)
    return nxt, mx.array(0.0)


def ms_per_token(sm, prompt, tokens: int) -> float:
    drafter = DrafterSpec.parse("none").build(sm, None, 0)
    run = loop.Decode(sm, prompt, drafter, loop.DecodeConfig(max_tokens=tokens))
    t0 = time.perf_counter()
    for _ in run.passes():
        pass
    return (time.perf_counter() - t0) * 1e3 / len(run.generated)


def main() -> None:
    ensure_fast_blas()
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    sm = load("tiny", budget="100%", with_mtp=False)
    prompt = sm.encode("def fibonacci(n):")
    checked_next = loop.greedy_next
    ms_per_token(sm, prompt, 8)  # warm up
    times = {"checked": [], "unchecked": []}
    for _ in range(args.pairs):
        for name, fn in (("checked", checked_next), ("unchecked", unchecked_next)):
            loop.greedy_next = fn
            times[name].append(ms_per_token(sm, prompt, args.tokens))
    loop.greedy_next = checked_next
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "command": f"python benchmarks/bench_nan_check.py --tokens {args.tokens} --pairs {args.pairs}",
        "model": "tiny (bundled), budget 100%, greedy",
        "ms_per_token": {
            k: {"median": med[k], "min": min(v), "max": max(v)} for k, v in times.items()
        },
        "check_cost_ms_per_token": med["checked"] - med["unchecked"],
        "check_cost_share": med["checked"] / med["unchecked"] - 1,
        # the fastest run of each is the least disturbed by other work on shared cores
        "check_cost_share_of_fastest": min(times["checked"]) / min(times["unchecked"]) - 1,
        "machine": machine_info(),
    }
    write_result(RESULTS / "nan_check.json", result)
    print(
        f"greedy tiny: {med['checked']:.3f} ms/token checked, {med['unchecked']:.3f} unchecked "
        f"({100 * result['check_cost_share']:+.2f}%; fastest runs "
        f"{100 * result['check_cost_share_of_fastest']:+.2f}%)"
    )


if __name__ == "__main__":
    main()
