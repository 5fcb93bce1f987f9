"""Host time a plain decode token spends on its cache steps at full budget: counted against
replayed (specdec.stream.streamer, counted steps), interleaved, one warm model.

    python benchmarks/bench_host_steps.py [--model tiny] [--tokens 128] [--rounds 5]   # ~1 min

Every streamed expert resident (`--budget 100% --warm`), plain greedy decoding through the loop
`specdec generate` runs, with its steps counted (loop.COUNT_STEPS, the default) and replayed
from the routing read back (specdec.bench.loop_parts' `ours` and `ours_replayed`), run as
loop_parts runs its variants (`interleaved`: one warm-up run of each, then the order alternating
each round, every run's tokens checked equal). Timed by wrappers around the two parts counting
removes or shrinks (specdec.bench.overhead's HostSplit, as the `overhead` step's loop parts are
timed), over the run's tokens (the prefill's catch-up, the same on both sides, among them): the
deferred steps' catch-up (the routing's host read and its replay; counted: the counts alone)
and the routing's join into one array a token (Deferred.join; counted: nothing to join). Also
each run's wall and main-thread CPU µs a token after the first (its records' time), which on a
CPU backend is the forward's compute and says little about host work; on a GPU host-bound at
full budget (docs/results/cuda.md) the host µs are the token's. Writes
benchmarks/results/host_steps.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.bench.loop_parts import Variant, interleaved, variants  # noqa: E402
from specdec.bench.overhead import PROMPT, HostSplit  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.stream.loader import load  # noqa: E402
from specdec.stream.streamer import Deferred, Streamer  # noqa: E402

PARTS = {"catch_up": (Streamer, "catch_up"), "join": (Deferred, "join")}  # timed by HostSplit
SIDES = {"counted": "ours", "replayed": "ours_replayed"}  # loop_parts' variants: generate as is


def _split(run: Variant, spent: list[dict[str, float]]) -> Variant:
    """`run` with PARTS timed by the overhead step's HostSplit (its clock reads both sides pay);
    each call's wall seconds per part appended to `spent`."""

    def timed(n: int) -> tuple[list[int], float]:
        split = HostSplit()
        for part, (cls, name) in PARTS.items():
            split.wrap(cls, name, part)
        try:
            return run(n)
        finally:
            split.restore()
            spent.append({part: split.wall[part] for part in PARTS})

    return timed


def run(model: str, tokens: int, rounds: int) -> dict:
    sm = load(model, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        ours = variants(sm, None, sm.encode(PROMPT))  # no resident model: its variant not run
        spent = {side: [] for side in SIDES}
        runs = {side: _split(ours[v], spent[side]) for side, v in SIDES.items()}
        out = interleaved(runs, tokens, rounds)  # tokens checked equal, order alternating
        for side, v in out.items():
            for part in PARTS:  # each side's first call warmed it up, untimed
                v[f"{part}_us"] = [1e6 * s[part] / tokens for s in spent[side][1:]]
                v[f"{part}_median"] = statistics.median(v[f"{part}_us"])
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
        print(f"{side:9s} catch_up {v['catch_up_median']:6.1f} µs  join {v['join_median']:5.1f}"
              f" µs  wall {v['wall_median']:7.0f} µs a token")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
