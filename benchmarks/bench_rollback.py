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

    python benchmarks/bench_rollback.py --auto --tokens 256

`--gamma auto` where passes roll back: oracle:0.3-0.95 and mtp, auto against plain decoding on
the same checkpoint and budget, bytes per committed token (re-feeds included) and modeled time
on m4-24gb (auto's own profile) — the never-lose check where a rejected pass costs a re-feed
the chooser's candidates do not price (its guard counts what each pass's record spent).
Writes benchmarks/results/rollback_auto.json.
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

from specdec.checkpoint.random_models import make_random  # noqa: E402
from specdec.clock.profiles import DEFAULT_PROFILE, get_profile  # noqa: E402
from specdec.core.files import write_atomic  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.decode.loop import DecodeConfig  # noqa: E402
from specdec.decode.run import generate  # noqa: E402
from specdec.gamma.spec import AUTO  # noqa: E402
from specdec.stream.loader import load  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "rollback.json"
AUTO_RESULT = RESULT.with_name("rollback_auto.json")
AUTO_DRAFTERS = ("oracle:0.3", "oracle:0.6", "oracle:0.8", "oracle:0.95", "mtp")
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


def auto_vs_plain(sm, prompt: list[int], tokens: int) -> dict:
    """Per drafter: auto's bytes per committed token and modeled time over plain's."""
    profile = get_profile(DEFAULT_PROFILE)  # what auto prices passes on by default
    key = f"modeled_tokens_per_s/{profile.name}"
    rows = {}
    for drafter in AUTO_DRAFTERS:
        runs = {}
        for gamma in (1, AUTO):
            sm.reset_cache()
            cfg = DecodeConfig(gamma=gamma, max_tokens=tokens)
            runs[gamma] = generate(sm, prompt, drafter, cfg, (profile,), stop_at_eos=False)
        plain, auto = runs[1].summary, runs[AUTO].summary
        recs = runs[AUTO].records
        rows[drafter] = {
            "bytes_auto_over_plain": round(auto["bytes_per_token"] / plain["bytes_per_token"], 4),
            "time_auto_over_plain": round(plain[key] / auto[key], 4),
            "refeed_share_of_bytes": round(
                sum(r.refeed_bytes_read for r in recs) / max(1, sum(r.bytes_read for r in recs)), 3
            ),
            "passes_drafted": sum(r.drafted > 0 for r in recs),
            "passes": len(recs),
            "tokens_equal_plain": runs[AUTO].tokens == runs[1].tokens,
        }
        print(drafter, rows[drafter], flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--auto", action="store_true", help="auto vs plain where passes roll back")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rollback-") as tmp:
        os.environ.setdefault("SPECDEC_CACHE", str(Path(tmp) / "cache"))
        src = make_random("qwen3_next", Path(tmp) / "qwen3_next", bits=4)
        sm = load(src, budget="30%", io="buffered")
        prompt = sm.encode(PROMPT)
        if args.auto:
            rows = auto_vs_plain(sm, prompt, args.tokens)
            sm.close()
            out = {"command": " ".join(sys.argv), "machine": machine_info(), "budget": "30%"}
            out["profile"] = DEFAULT_PROFILE
            write_result(AUTO_RESULT, out | {"drafters": rows})
            return 0
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
