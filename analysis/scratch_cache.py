"""+scratch against LRU, +protect, S3-FIFO and opt_bypass: bytes and modeled time per committed token.

    .venv/bin/python -m analysis.scratch_cache --runtime      # bundled model, runtime (~3 min)
    .venv/bin/python -m analysis.scratch_cache --replay       # MiniMax trace, replay (~9 min)

Two markdown tables for docs/results/caching.md ("Verify scratch"), each row (budget, γ, α),
one column per policy, "B / t" = bytes per committed token / modeled ms per committed token on
the default device profile (m4-24gb):

- runtime: the bundled model (`tiny`), oracle drafter, one in-process load per (budget, policy),
  64 tokens per γ; decoding is lossless and the oracle's drafts do not depend on the cache, so
  every policy decodes the same passes (checked: same tokens) and opt_bypass is the replay of
  the LRU job's own verify passes (bytes only; its warm start is free).
- replay: the calibrated MiniMax-M2.5 trace (`specdec trace synth --like minimax-m2.5
  --positions 1000 --seed 0`, into a temporary directory), replayed at acceptance α; modeled time
  as analysis/speculation_at_scale.py models a pass (verify forwards, misses spread evenly).

+scratch holds an eighth of the budget's slots back from the policy as scratch; the budget (the
slots column) is the same for every policy. Bold: the best practical policy of the row.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from analysis._scale_sweep import synthesize, tokens_per_s
from analysis.spec_cache import records_access, replay_bytes
from specdec.clock.check import MINIMAX_M25
from specdec.clock.profiles import DEFAULT_PROFILE, get_profile
from specdec.clock.shapes import ModelShape
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.sim.replay import access_sequence, policy_hits, score
from specdec.stream.loader import load

POLICIES = (
    "lru", "lru+scratch", "lru+protect", "lru+protect+scratch", "s3fifo", "s3fifo+scratch",
)  # fmt: skip
BOUND = "opt_bypass"
SHARES = (0.05, 0.10, 0.25, 0.50)
GAMMAS = (2, 4, 8)
CELLS = [(s, g, 0.8) for s in SHARES for g in GAMMAS] + [
    (s, 4, a) for s in SHARES for a in (0.6, 1.0)
]  # α 0.8 everywhere, α 0.6 and 1.0 at γ = 4
RUNTIME_ALPHA = (0.9,)
PROMPT = "import os\nimport sys\n\ndef main(argv):\n    "


def runtime_rows(tokens: int) -> list[dict]:
    """Rows (budget, γ, α) of the bundled model decoded with every policy; opt_bypass replayed."""
    profiles = (get_profile(DEFAULT_PROFILE),)
    rows: dict[tuple, dict] = {}
    lru_jobs: dict[tuple, tuple] = {}
    # the LRU jobs' records files, removed however the runs end
    with tempfile.TemporaryDirectory(prefix="scratch-cache-") as tmp:
        for share in SHARES:
            for policy in POLICIES:
                sm = load("tiny", budget=f"{share:.0%}", io="buffered", policy=policy, threads=1)
                try:
                    _decode(sm, share, policy, Path(tmp), tokens, profiles, rows, lru_jobs)
                finally:
                    sm.close()
    out = []
    for (share, g, alpha), row in sorted(rows.items()):
        records, n, idx = lru_jobs[share, g, alpha]
        E = idx.layers[idx.layer_ids[0]].n_experts
        acc = records_access(records, E)
        size = [idx.slot_bytes] * len(records[0].routing)
        row["cells"][BOUND] = (replay_bytes(BOUND, acc, n, size, E), None)
        out.append({"budget": f"{share:.0%} ({n} slots)", "gamma": g, "alpha": alpha, **row})
    return out


def _decode(
    sm, share: float, policy: str, tmp: Path, tokens: int, profiles, rows: dict, lru_jobs: dict
) -> None:
    """Every (γ, α) of one budget share and policy on `sm`, into `rows` (and the LRU jobs)."""
    prompt = sm.tokenizer.encode(PROMPT)
    for g in GAMMAS:
        for alpha in RUNTIME_ALPHA:
            sm.reset_cache()
            cfg = DecodeConfig(gamma=g, max_tokens=tokens)
            # the LRU job's records keep its routing: opt_bypass replays its passes
            path = tmp / f"{share}-{g}-{alpha}.jsonl" if policy == "lru" else None
            res = generate(
                sm, prompt, f"oracle:{alpha}", cfg, stop_at_eos=False, profiles=profiles,
                records_path=path,
            )  # fmt: skip
            s = res.summary
            ms = sum(r.modeled_s[DEFAULT_PROFILE] for r in res.records) / s["committed"]
            key = (share, g, alpha)
            row = rows.setdefault(key, {"tokens": res.tokens, "cells": {}})
            if row["tokens"] != res.tokens:
                raise SystemExit(f"{policy} {key}: decoded other tokens than lru")
            row["cells"][policy] = (s["bytes_per_token"], 1e3 * ms)
            if policy == "lru":
                lru_jobs[key] = (res.records, s["cache_slots"], sm.streamer.index)
            print(f"  {policy} {share:.0%} γ={g} α={alpha} done", file=sys.stderr)


def replay_rows(positions: int, seed: int) -> list[dict]:
    """Rows (budget, γ, α) of the calibrated MiniMax trace through every policy and the bound."""
    profile, shape = get_profile(DEFAULT_PROFILE), ModelShape.from_config(MINIMAX_M25)
    with tempfile.TemporaryDirectory() as tmp:
        trace = synthesize(positions, seed, tmp)
    total = trace.n_layers * trace.n_experts
    out, accs = [], {}
    for share, g, alpha in CELLS:
        acc = accs.setdefault((g, alpha), access_sequence(trace, g, alpha, seed))
        n = round(share * total)
        cells = {}
        for p in (*POLICIES, BOUND):
            hit, pre = policy_hits(p, acc, n)
            r = score(p, acc, n, trace, g, alpha, hit, pre)
            cells[p] = (r.bytes_per_token, 1e3 / tokens_per_s(profile, shape, r))
        out.append(
            {"budget": f"{share:.0%} ({n} slots)", "gamma": g, "alpha": alpha, "cells": cells}
        )
        print(f"  {share:.0%} γ={g} α={alpha} done", file=sys.stderr)
    return out


def render(rows: list[dict], unit: float, unit_name: str) -> str:
    """Markdown: bytes / unit and modeled ms per committed token; bold the best practical."""
    cols = [*POLICIES, BOUND]
    head = ["budget", "γ", "α", *cols, "best vs lru (bytes)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|" + "---:|" * (len(head) - 3)]
    for r in rows:
        c = r["cells"]
        best = min(POLICIES, key=lambda p: c[p][0])
        cells = []
        for p in cols:
            b, t = c[p]  # b None: the bound's replay is below the widest step
            text = "—" if b is None else f"{b / unit:.3g}" + ("" if t is None else f" / {t:.3g}")
            cells.append(f"**{text}**" if p == best else text)
        ratio = f"{best} {c[best][0] / c['lru'][0]:.2f}x"
        lines.append(
            f"| {r['budget']} | {r['gamma']} | {r['alpha']} | "
            + " | ".join(cells)
            + f" | {ratio} |"
        )
    return (
        f"{unit_name} per committed token / modeled ms per committed token\n\n"
        + "\n".join(lines)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", action="store_true", help="the bundled model's table")
    ap.add_argument("--replay", action="store_true", help="the MiniMax trace's table")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per runtime job")
    ap.add_argument("--positions", type=int, default=1000, help="positions of the trace")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.runtime:
        print(render(runtime_rows(args.tokens), 1e3, "KB"))
    if args.replay:
        print(render(replay_rows(args.positions, args.seed), 1e9, "GB"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
