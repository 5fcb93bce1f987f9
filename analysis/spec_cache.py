"""Speculation-aware caching against plain LRU and Belady: bytes read per committed token.

    .venv/bin/specdec-exp gamma=1,2,4,8 drafter=oracle "cache.budget=5%,10%,25%,50%" \
        "cache.policy=lru,lru+demote,lru+protect,lru+demote+protect,sieve,sieve+demote+protect,s3fifo,s3fifo+demote+protect" \
        max_tokens=256 sweep=spec-cache logger=disabled
    .venv/bin/python -m analysis.spec_cache --runs runs/sweeps/spec-cache --no-trace  # bundled
    .venv/bin/python -m analysis.spec_cache         # MiniMax trace, ~12 min on a loaded 2 cores

Two markdown tables (docs/results/caching.md), rows (budget, γ), one column
per policy, bytes per committed token (KB for the bundled model, GB for MiniMax):

- the bundled model, runtime: each policy's own `specdec-exp` job (oracle drafter, α = 0.9);
  beside it the replay of the LRU job's own verify passes (records' routing, accepted counts)
  through LRU (a check of the replay), Belady's MIN and opt_bypass. Decoding is lossless and
  the oracle's drafts do not depend on the cache, so every policy's job runs the same passes
  (checked: same tokens) and one bound serves the row. The replays start cold; the runtime's
  cache was warmed by the prompt's prefill, so at large budgets the runtime beats the cold
  replay and cold Belady: opt_bypass (free optimal warm start) is the bound that holds there.
- the calibrated MiniMax-M2.5 trace (`specdec trace synth --like minimax-m2.5`, synthesized
  into a temporary directory unless --trace names one), replayed at acceptance --alpha through
  the same policies, libCacheSim's Sieve and S3FIFO (request semantics, specdec.sim.lcs),
  Belady and opt_bypass (the optimum when misses may bypass the cache).

The best non-bound policy of each row is in bold; "vs lru" is its bytes over LRU's.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import numpy as np

from specdec.cli import main as specdec_main
from specdec.core.errors import BudgetError, SpecdecError
from specdec.report.collect import collect_jobs
from specdec.sim.replay import Access, access_sequence, policy_hits
from specdec.trace.format import Trace, load_trace

POLICIES = (
    "lru", "lru+demote", "lru+protect", "lru+demote+protect",
    "sieve", "sieve+demote+protect", "s3fifo", "s3fifo+demote+protect",
)  # fmt: skip
RUNTIME = ("lru", "lru+demote", "lru+protect", "lru+demote+protect", "sieve", "s3fifo")
PEERS = ("lcs:Sieve", "lcs:S3FIFO")
BOUNDS = ("belady", "opt_bypass")
REPLAYED = ("lru (replay)", "belady (replay)", "opt_bypass (replay)")
GAMMAS = (1, 2, 4, 8)
SHARES = (0.05, 0.10, 0.25, 0.50)


def records_access(records, n_experts: int) -> Access:
    """The verify passes of one decoding job (PassRecords with routing), as replay steps."""
    layers = sorted(records[0].routing, key=int)
    L = len(layers)
    gamma = max(len(r.routing[layers[0]]) for r in records)
    k = len(records[0].routing[layers[0]][0])
    routes = np.full((len(records), gamma, L, k), -1, np.int64)  # [P, γ, L, k]
    plan = np.zeros((len(records), 3), np.int64)  # (first position, positions, accepted)
    pos = 0
    for p, r in enumerate(records):
        a = np.array([r.routing[lid] for lid in layers])  # [L, γp, k]
        routes[p, : a.shape[1]] = a.transpose(1, 0, 2) + np.arange(L)[:, None] * n_experts
        plan[p] = (pos, a.shape[1], r.accepted)
        pos += 1 + r.accepted
    return Access.from_routes(routes, plan, L * n_experts)


def replay_bytes(policy: str, acc: Access, n: int, trace_bytes: list[int], n_experts: int):
    """Bytes per committed token of `policy` over `acc` at n slots; None below the widest step."""
    try:
        hit, pre = policy_hits(policy, acc, n)
    except BudgetError:
        return None
    read = np.asarray(trace_bytes, np.int64)[acc.keys[~hit] // n_experts].sum()
    return float(read) / max(acc.committed, 1)


def runtime_rows(run_dir: Path) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the bundled model's runtime jobs plus their records' replays."""
    jobs = [j for j in collect_jobs(run_dir) if j.records]
    if not jobs:
        raise SpecdecError(f"{run_dir} holds no decoding job: run the sweep in this docstring")
    cells: dict[tuple[str, int], dict] = {}
    for j in jobs:
        cache = j.card.setting["cache"]
        row = cells.setdefault((cache["budget"], j.gamma), {"jobs": {}})
        row["jobs"][cache["policy"]] = j
    out = []
    for (budget, gamma), row in sorted(cells.items(), key=lambda x: (float(x[0][0][:-1]), x[0][1])):
        jobs_here = row["jobs"]
        tokens = {tuple(t for r in j.records for t in r.tokens) for j in jobs_here.values()}
        if len(tokens) != 1:
            raise SpecdecError(
                f"budget {budget} γ={gamma}: the policies' jobs decoded different tokens"
            )
        ref = jobs_here.get("lru") or next(iter(jobs_here.values()))
        E, n = ref.model["n_experts"], ref.model["cache_slots"]
        acc = records_access(ref.records, E)
        size = [ref.model["slot_bytes"]] * len(ref.records[0].routing)
        vals = {p: j.summary["bytes_per_token"] for p, j in jobs_here.items()}
        for p in REPLAYED:
            vals[p] = replay_bytes(p.split()[0], acc, n, size, E)
        out.append({"budget": f"{budget} ({n} slots)", "gamma": gamma, **vals})
    return [*RUNTIME, *REPLAYED], out


def trace_rows(trace: Trace, alpha: float, seed: int) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the trace replayed at every (share, γ) through every policy."""
    E = trace.n_experts
    total = trace.n_layers * E
    cols = [*POLICIES, *PEERS, *BOUNDS]
    out = []
    accs = {g: access_sequence(trace, g, alpha if g > 1 else 1.0, seed) for g in GAMMAS}
    for share in SHARES:
        n = round(share * total)
        for g in GAMMAS:
            vals = {p: replay_bytes(p, accs[g], n, trace.expert_bytes, E) for p in cols}
            out.append({"budget": f"{share:.0%} ({n} slots)", "gamma": g, **vals})
            print(f"  {share:.0%} γ={g} done", file=sys.stderr)
    return cols, out


def render(cols: list[str], rows: list[dict], unit: float) -> str:
    """Markdown: bytes per committed token over `unit`; bold marks the best real policy."""
    real = [c for c in cols if c not in BOUNDS and "replay" not in c and not c.startswith("lcs:")]
    head = ["budget", "γ", *cols, "best vs lru"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for r in rows:
        have = {c: r[c] for c in real if r.get(c) is not None}
        best = min(have, key=have.get) if have else None
        cells = []
        for c in cols:
            v = r.get(c)
            text = "—" if v is None else f"{v / unit:.3g}"
            cells.append(f"**{text}**" if c == best else text)
        ratio = f"{best} {have[best] / have['lru']:.2f}x" if best and have.get("lru") else "—"
        lines.append(f"| {r['budget']} | {r['gamma']} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def synthesize(positions: int, seed: int, where: str) -> Trace:
    out = str(Path(where) / "minimax")
    argv = ["trace", "synth", out, "--like", "minimax-m2.5", "--positions", str(positions)]
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the results section
        if specdec_main([*argv, "--seed", str(seed)]) != 0:
            raise SystemExit("specdec trace synth failed")
    return load_trace(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, help="the bundled model's sweep directory")
    ap.add_argument("--trace", help="a MiniMax-shape trace (default: synthesize one)")
    ap.add_argument("--no-trace", action="store_true", help="the bundled model's table only")
    ap.add_argument("--positions", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.8, help="acceptance of the trace replay")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        if args.runs:
            cols, rows = runtime_rows(args.runs)
            print(render(cols, rows, 1e3), end="" if args.no_trace else "\n")
        if not args.no_trace:
            with tempfile.TemporaryDirectory() as tmp:
                trace = (
                    load_trace(args.trace)
                    if args.trace
                    else synthesize(args.positions, args.seed, tmp)
                )
            cols, rows = trace_rows(trace, args.alpha, args.seed)
            print(render(cols, rows, 1e9), end="")
    except SpecdecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
