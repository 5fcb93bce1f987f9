"""Host time a plain decode token spends on its cache steps at full budget: counted against
replayed (specdec.stream.streamer, counted steps), interleaved, one warm model.

    python benchmarks/bench_host_steps.py [--model tiny] [--tokens 128] [--rounds 5]   # ~1 min

Every streamed expert resident (`--budget 100% --warm`), plain greedy decoding through the loop
`specdec generate` runs, with its steps counted (loop.COUNT_STEPS, the default) and replayed
from the routing read back (specdec.bench.loop_parts' `ours` and `ours_replayed`), the order
alternating each round after one warm-up round of each. Timed by wrappers around the two parts
counting removes or shrinks (specdec.bench.overhead's HostSplit, as the `overhead` step's loop
parts are timed), over the run's tokens (the prefill's catch-up, the same on both
sides, among them): the deferred steps' catch-up (the routing's host read and its replay;
counted: the counts alone) and the routing's join into one array a token (Deferred.join;
counted: nothing to join). The tokens of every run are checked equal. Also each run's wall µs a
token after the first (its records' time), which on a CPU backend is the forward's compute and
says little about host work; on a GPU host-bound at full budget (docs/results/cuda.md) the host
µs are the token's. Writes benchmarks/results/host_steps.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.bench.loop_parts import variants  # noqa: E402
from specdec.bench.overhead import PROMPT, HostSplit  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.stream.loader import load  # noqa: E402
from specdec.stream.streamer import Deferred, Streamer  # noqa: E402

PARTS = {"catch_up": (Streamer, "catch_up"), "join": (Deferred, "join")}  # timed by HostSplit
SIDES = {"counted": "ours", "replayed": "ours_replayed"}  # loop_parts' variants: generate as is


def run(model: str, tokens: int, rounds: int) -> dict:
    sm = load(model, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        prompt = sm.encode(PROMPT)
        runs = variants(sm, None, prompt)  # no resident model: its variant is not run
        out = {side: {"catch_up_us": [], "join_us": [], "wall_us": []} for side in SIDES}
        reference = None
        for r in range(rounds + 1):  # round 0 warms both up, untimed
            for side in list(SIDES) if r % 2 == 0 else reversed(SIDES):
                split = HostSplit()  # overhead's timers: wall per part (each side pays them)
                for part, (cls, name) in PARTS.items():
                    split.wrap(cls, name, part)
                try:
                    got, wall = runs[SIDES[side]](tokens)  # wall: from the second token on
                finally:
                    split.restore()
                spent = split.wall
                reference = reference or got
                if got != reference:
                    raise AssertionError(f"{side}'s tokens part from the first run's")
                if r:
                    out[side]["catch_up_us"].append(1e6 * spent["catch_up"] / tokens)
                    out[side]["join_us"].append(1e6 * spent["join"] / tokens)
                    out[side]["wall_us"].append(1e6 * wall / (tokens - 1))
        for v in out.values():
            v.update({f"{k}_median": statistics.median(x) for k, x in list(v.items())})
        return {"model": model, "moe_layers": len(sm.main_moe_layers), "tokens": tokens,
                "rounds": rounds, "prompt": PROMPT, **out}  # fmt: skip
    finally:
        sm.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "host_steps.json"))
    args = ap.parse_args()
    result = run(args.model, args.tokens, args.rounds)
    result |= {"command": " ".join(sys.argv), "machine": machine_info()}
    write_result(args.out, result)
    for side in ("counted", "replayed"):
        v = result[side]
        print(f"{side:9s} catch_up {v['catch_up_us_median']:6.1f} µs  join {v['join_us_median']:5.1f}"
              f" µs  wall {v['wall_us_median']:7.0f} µs a token")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
