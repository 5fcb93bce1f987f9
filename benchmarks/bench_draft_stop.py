"""The self-draft's routing as a prediction of verify's reads, and auto with and without the stop.

    nice python benchmarks/bench_draft_stop.py          # 256 tokens, 5/10/25/50%, m4 and m5
    nice python benchmarks/bench_draft_stop.py --tokens 128 --budgets 10% --profiles m4-24gb

`specdec generate`'s library path (specdec.decode.run.generate) on the bundled tiny model, the
self drafter, LRU, modeled on each profile in turn (m4-24gb, where the bundled model's router
syncs make every self-draft forward cost a token's time, and m5-24gb, whose runtime syncs 30x
faster and where auto drafts at 5%), the chooser costing on it too. Per budget, one after another
on the same loaded model (cache reset before each run): plain greedy (the reference), then
`--gamma auto` without the draft stop (mode "record": predictions recorded, drafts never cut),
auto with it (mode "stop"), and fixed γ = 2 and γ = 4 in mode "record" (the prediction under
pressure; a fixed γ never stops). Per run: bytes read per committed token, modeled tokens/s,
tokens == plain's, why drafts ended, and the prediction's accuracy over the passes that drafted:
per MoE layer, the union and the misses (experts not resident before the pass) the draft's
routing predicted for the positions it routed, beside what verify's routing selected on the
same positions against the same resident set; precision = predicted misses that were misses /
predicted misses, recall = the same / actual misses; "read" is what verify read over all its
positions (the last one is not predicted: the draft does not route it). The first MoE layer
("first") is reported apart from the deeper ones ("deeper"). "free": of the drafted positions
routed (1..steps−1), the share whose experts were all predicted resident or already in the
pass's union (no predicted miss added): where a drafted position costs no read. Every number here is modeled or
counted, none timed, so the order of the runs flatters none. Writes
benchmarks/results/draft_stop.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.core.machine import machine_info, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RUNS = (("plain", "1", "off"), ("auto", "auto", "record"), ("auto+stop", "auto", "stop"))
RUNS += (("fixed2", "2", "record"), ("fixed4", "4", "record"))


def accuracy(records, first: str) -> dict:
    """The draft's predictions against verify's routing, summed over the passes that drafted,
    for the first MoE layer and the deeper ones."""
    out = {}
    for part in ("first", "deeper"):
        sums = collections.Counter()
        for r in records:
            d = r.draft_routing
            if not d:
                continue
            for lid in d["predicted_misses"]:
                if (lid == first) != (part == "first"):
                    continue
                sums["passes_layers"] += 1
                for key in ("predicted_union", "actual_union", "predicted_misses"):
                    sums[key] += d[key][lid]
                sums["actual_misses"] += d["actual_misses"][lid]
                sums["hit_misses"] += d["hit_misses"][lid]
                sums["union_abs_err"] += abs(d["predicted_union"][lid] - d["actual_union"][lid])
                sums["miss_abs_err"] += abs(d["predicted_misses"][lid] - d["actual_misses"][lid])
                sums["read"] += r.misses[lid]
        n = max(sums["passes_layers"], 1)
        out[part] = dict(sums) | {
            "precision": sums["hit_misses"] / max(sums["predicted_misses"], 1),
            "recall": sums["hit_misses"] / max(sums["actual_misses"], 1),
            "union_mae": sums["union_abs_err"] / n,
            "miss_mae": sums["miss_abs_err"] / n,
        }
    return out


def free_positions(records) -> float | None:
    """Share of routed drafted positions that add no predicted miss to their pass."""
    added = []
    for r in records:
        m = r.draft_routing.get("misses_by_gamma", [])  # [steps] predicted misses of γ = 1..
        added += [b - a for a, b in zip(m[:-1], m[1:], strict=True)]
    return sum(1 for n in added if n == 0) / len(added) if added else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--budgets", default="5%,10%,25%,50%")
    p.add_argument("--profiles", default="m4-24gb,m5-24gb")
    p.add_argument("--prompt", default="def fibonacci(n):")
    args = p.parse_args()

    from specdec.clock.profiles import get_profile
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    rows = []
    for name, budget in ((n, b) for n in args.profiles.split(",") for b in args.budgets.split(",")):
        profile = get_profile(name)
        sm = load("tiny", budget=budget)
        prompt = sm.encode(args.prompt)
        first = str(sm.main_moe_layers[0])
        plain = None  # the first run's result
        for label, gamma, mode in RUNS:
            sm.reset_cache()
            cfg = DecodeConfig(gamma=gamma, max_tokens=args.tokens, draft_stop=mode)
            drafter = "none" if label == "plain" else "self"
            res = generate(sm, prompt, drafter, cfg, (profile,), stop_at_eos=False)
            plain = plain or res
            s = res.summary
            drafted = [r for r in res.records if r.draft_routing]
            row = {
                "profile": name, "budget": budget, "run": label, "gamma": gamma, "draft_stop": mode,
                "slots": sm.streamer.cache.n_slots,
                "bytes_per_token": s["bytes_per_token"],
                "tokens_per_s": s[f"modeled_tokens_per_s/{name}"],
                "vs_plain_bytes": s["bytes_per_token"] / plain.summary["bytes_per_token"],
                "vs_plain_time": plain.summary[f"modeled_tokens_per_s/{name}"]
                / s[f"modeled_tokens_per_s/{name}"],
                "same_tokens": res.tokens == plain.tokens,
                "acceptance": s.get("acceptance"),
                "gamma_hist": s.get("gamma_chosen_hist"),
                "passes": len(res.records),
                "passes_drafted": len(drafted),
                "why": dict(collections.Counter(r.draft_routing["why"] for r in drafted)),
                "free": free_positions(drafted),
                "accuracy": accuracy(res.records, first) if drafted else None,
            }  # fmt: skip
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "accuracy"}), flush=True)
            if row["accuracy"]:
                for part, acc in row["accuracy"].items():
                    keep = ("precision", "recall", "union_mae", "miss_mae")
                    brief = {k: round(acc[k], 3) for k in keep}
                    brief |= {k: acc.get(k, 0) for k in ("predicted_misses", "actual_misses")}
                    print(f"  {part}: {json.dumps(brief | {'read': acc.get('read', 0)})}")
        sm.close()
    out = RESULTS / "draft_stop.json"
    meta = {
        "profiles": args.profiles.split(","),
        "policy": "lru",
        "model": "tiny",
        "drafter": "self",
        "tokens": args.tokens,
        "prompt": args.prompt,
        "command": " ".join(sys.argv),
        "machine": machine_info(),
    }
    write_result(out, {"meta": meta, "rows": rows})
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
