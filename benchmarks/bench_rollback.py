"""What rolling back an untrimmable cache costs: Qwen3-Next speculation with the re-feed.

    python benchmarks/bench_rollback.py --tokens 64 --repeats 3

A random qwen3_next checkpoint (`specdec make-random qwen3_next`, 4-bit, with its MTP layer) is
streamed at a 30% budget. For drafters oracle:0.6 / oracle:0.8 / oracle:0.95 (acceptance set by
the oracle; random MTP weights accept almost nothing) and mtp at γ 2 and 4, greedy decoding
runs `--repeats` times, interleaved; from the records:

- re-fed positions per committed token, and as a share of every position the main model ran
  (verify + re-feed): the compute the rollback adds;
- re-feed bytes as a share of all bytes read: the reads it adds (its accesses are a subset of
  the verify pass's union, so they miss only where the verify itself evicted them);
- wall seconds of passes that rolled back vs passes that accepted every draft, same γ: the
  measured cost of a rollback on this CPU (a re-feed of accepted + 1 positions).

Tokens are checked equal to plain greedy (γ = 1) in every run. Writes
benchmarks/results/rollback.json (with the machine and its load: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.decode.loop import DecodeConfig  # noqa: E402
from specdec.decode.run import generate  # noqa: E402
from specdec.host.machine import machine_info  # noqa: E402
from specdec.model.loader import load  # noqa: E402
from specdec.model.random_models import make_random  # noqa: E402
from specdec.store.files import write_atomic  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "rollback.json"
PROMPT = "import os\nimport sys\n\ndef main(argv):\n    "
CASES = [(d, g) for d in ("oracle:0.6", "oracle:0.8", "oracle:0.95", "mtp") for g in (2, 4)]


def one(sm, prompt: list[int], drafter: str, gamma: int, tokens: int, seed: int) -> dict:
    sm.reset_cache()
    cfg = DecodeConfig(gamma=gamma, max_tokens=tokens, seed=seed)
    res = generate(sm, prompt, drafter, cfg, stop_at_eos=False)
    recs = res.records
    ran = sum(r.drafted + 1 + r.refed for r in recs)
    rolled = [r.wall_s for r in recs if r.refed]
    clean = [r.wall_s for r in recs if not r.refed and r.drafted == gamma - 1]
    return {
        "tokens": res.tokens,
        "committed": sum(r.committed for r in recs),
        "passes": len(recs),
        "rollbacks": len(rolled),
        "refed": sum(r.refed for r in recs),
        "positions_run": ran,
        "refeed_bytes": sum(r.refeed_bytes_read for r in recs),
        "bytes": sum(r.bytes_read for r in recs),
        "acceptance": res.summary["acceptance"],
        "wall_rolled_median_s": statistics.median(rolled) if rolled else None,
        "wall_clean_median_s": statistics.median(clean) if clean else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rollback-") as tmp:
        os.environ.setdefault("SPECDEC_CACHE", str(Path(tmp) / "cache"))
        src = make_random("qwen3_next", Path(tmp) / "qwen3_next", bits=4)
        sm = load(src, budget="30%", io="buffered")
        prompt = sm.encode(PROMPT)
        runs: dict[str, list[dict]] = {}
        for rep in range(args.repeats):  # interleaved: every case once per round
            plain = one(sm, prompt, "none", 1, args.tokens, rep)["tokens"]
            for drafter, gamma in CASES:
                r = one(sm, prompt, drafter, gamma, args.tokens, rep)
                if r.pop("tokens") != plain:
                    raise SystemExit(f"{drafter} γ={gamma}: tokens differ from plain greedy")
                runs.setdefault(f"{drafter} γ={gamma}", []).append(r)
        sm.close()
    table = {}
    for case, rs in runs.items():
        committed = sum(r["committed"] for r in rs)
        rolled = [r["wall_rolled_median_s"] for r in rs if r["wall_rolled_median_s"]]
        clean = [r["wall_clean_median_s"] for r in rs if r["wall_clean_median_s"]]
        table[case] = {
            "acceptance": round(statistics.mean(r["acceptance"] for r in rs), 3),
            "rollbacks_per_pass": round(
                sum(r["rollbacks"] for r in rs) / sum(r["passes"] for r in rs), 3
            ),
            "refed_per_token": round(sum(r["refed"] for r in rs) / committed, 3),
            "refed_share_of_positions": round(
                sum(r["refed"] for r in rs) / sum(r["positions_run"] for r in rs), 3
            ),
            "refeed_share_of_bytes": round(
                sum(r["refeed_bytes"] for r in rs) / max(1, sum(r["bytes"] for r in rs)), 3
            ),
            "pass_wall_rolled_over_clean": (
                round(statistics.median(rolled) / statistics.median(clean), 2)
                if rolled and clean
                else None
            ),
        }
    out = {"command": " ".join(sys.argv), "machine": machine_info(), "cases": table}
    write_atomic(RESULT, json.dumps(out, indent=1) + "\n")
    for case, row in table.items():
        print(case, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
