"""The sweep of analysis/speculation_at_scale.py: the calibrated MiniMax trace replayed in verify
passes for each budget, policy, γ and α (bytes per committed token, modeled tokens/s).

    from analysis._scale_sweep import synthesize, sweep
    sw = sweep(synthesize(2000, 0, tmpdir), seed=0)

The text it becomes is analysis/_scale_text.py's; the command is analysis/speculation_at_scale.py.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

from specdec.cli import main as specdec_main
from specdec.clock.check import CONTEXT, MINIMAX_M25, spread_reads
from specdec.clock.profiles import DEFAULT_PROFILE, get_profile
from specdec.clock.roofline import Forward, forward_time
from specdec.clock.shapes import ModelShape
from specdec.costmodel.speedup import expected_tokens
from specdec.sim.replay import access_sequence, policy_hits, score
from specdec.trace.format import Trace, hotlist_keys, load_trace, profile_hotlist

EXPERT_BYTES = 7_962_624  # one 4-bit MiniMax-M2.5 expert (docs/trace-synth.md)
BUDGETS_GB = (3, 6, 9, 12)
GAMMAS = (1, 2, 3, 4, 8)
ALPHAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
FINE_STEP = 0.05  # break-even search grid, from 1 down to 0
POLICIES = ("lru", "slru", "lfu", "hotness", "static", "belady", "opt_bypass")
LCS = ("lcs:ARC", "lcs:S3FIFO", "lcs:WTinyLFU")  # slower (~0.6 s a replay): at 9 GB only
SLOPE = 0.58  # the question's union model k·(1 + 0.58·(γ − 1))
# break-even measures: bytes per token; modeled tokens/s verified in this harness's decode form
# (the M4 profile's runtime) and verified batched (a runtime that verifies in one forward)
MEASURES = ("bytes", "time", "batched")
PROFILE = DEFAULT_PROFILE


def slots(gb: float) -> int:
    return int(gb * 1e9) // EXPERT_BYTES


@dataclass
class Row:
    policy: str
    gb: float
    gamma: int
    alpha: float
    hit_rate: float
    bytes_per_token: float
    mean_union: float  # per layer per pass
    tok_s: float  # modeled on PROFILE, verify forwards only, in this harness's decode form
    tok_s_batched: float  # the same verified in one batched forward (a runtime that does)


@dataclass
class Sweep:
    rows: list[Row]
    break_even: dict[tuple[str, float, int], dict[str, float | None]]  # (policy, gb, γ) -> measure


def tokens_per_s(profile, shape: ModelShape, r, positionwise: bool = True) -> float:
    """Committed tokens/s of the mean verify pass: γ positions, the pass's mean union and misses
    per layer (misses spread evenly over the layers, rounded so they sum to the pass's); verified
    position by position as this harness's decode form does (`positionwise`), else batched."""
    steps = spread_reads(shape, r.misses / r.passes)  # one block is EXPERT_BYTES on MiniMax
    unions = {layer: r.mean_union for layer in sorted(shape.moe_layers)}
    fwd = Forward(r.gamma, CONTEXT, tuple(range(shape.n_layers)), unions, steps,
                  positionwise=positionwise)  # fmt: skip
    return r.committed / (r.passes * forward_time(profile, shape, fwd).total_s)


def _crossing(hi: tuple[float, float], lo: tuple[float, float]) -> float:
    """α where the margin (positive: pays) crosses 0 between (α_hi, m_hi > 0) and (α_lo, m_lo)."""
    (a_hi, m_hi), (a_lo, m_lo) = hi, lo
    return a_lo + (a_hi - a_lo) * (-m_lo) / (m_hi - m_lo)


def sweep(
    trace: Trace,
    budgets_gb=BUDGETS_GB,
    gammas=GAMMAS,
    alphas=ALPHAS,
    policies=POLICIES,
    lcs=LCS,
    lcs_gb: float = 9,
    seed: int = 0,
) -> Sweep:
    """Every (policy, budget, γ, α in `alphas`) row, and the break-even α per (policy, budget, γ)
    in bytes per token and in modeled tokens/s (both verify forms): the α below which γ loses to γ = 1, linear
    between the points of a 0.05 grid searched downward from 1; None when even α = 1 loses,
    0.0 when γ never loses down to α = 0."""
    profile, shape = get_profile(PROFILE), ModelShape.from_config(MINIMAX_M25)
    hot = hotlist_keys(trace, profile_hotlist(trace))  # static's pins: hindsight, as replay_trace
    keys = [(p, gb) for gb in budgets_gb for p in policies]
    keys += [(p, lcs_gb) for p in lcs if lcs_gb in budgets_gb]
    rows: list[Row] = []
    out: dict[tuple[str, float, int], dict[str, float | None]] = {}

    def run(acc, policy, gb, gamma, alpha) -> Row:
        hit, pre = policy_hits(policy, acc, slots(gb), hot if policy == "static" else None)
        r = score(policy, acc, slots(gb), trace, gamma, alpha, hit, pre)
        return Row(
            policy, gb, gamma, alpha, r.hit_rate, r.bytes_per_token, r.mean_union,
            tokens_per_s(profile, shape, r), tokens_per_s(profile, shape, r, positionwise=False),
        )  # fmt: skip

    acc = access_sequence(trace, 1, 1.0, seed)
    base = {key: run(acc, *key, 1, 1.0) for key in keys}
    rows += base.values()
    fine = [round(1 - i * FINE_STEP, 2) for i in range(round(1 / FINE_STEP) + 1)]
    for gamma in (g for g in gammas if g > 1):
        last: dict = {}  # (key, measure) -> (α, margin) of the last α where γ still paid
        found: dict = {}
        for alpha in fine:
            todo = [k for k in keys if alpha in alphas or len(found.get(k, {})) < len(MEASURES)]
            if not todo:
                continue
            acc = access_sequence(trace, gamma, alpha, seed)
            for key in todo:
                row = run(acc, *key, gamma, alpha)
                if alpha in alphas:
                    rows.append(row)
                b = base[key]
                margins = {
                    "bytes": b.bytes_per_token - row.bytes_per_token,
                    "time": row.tok_s - b.tok_s,
                    "batched": row.tok_s_batched - b.tok_s_batched,
                }
                for measure, m in margins.items():
                    if measure in found.setdefault(key, {}):
                        continue
                    if m > 0:
                        last[key, measure] = (alpha, m)
                    elif (key, measure) in last:
                        found[key][measure] = _crossing(last[key, measure], (alpha, m))
                    else:  # loses already at α = 1
                        found[key][measure] = None
        for key in keys:
            out[(*key, gamma)] = {m: found.get(key, {}).get(m, 0.0) for m in MEASURES}
    return Sweep(rows, out)


def model_bytes(gamma: int, alpha: float, union: float, L: int = 62) -> float:
    """Bytes per committed token when a pass reads its whole union (per layer) and nothing hits."""
    return L * union * EXPERT_BYTES / float(expected_tokens(alpha, gamma))


def question_union(gamma: int, k: int = 8) -> float:
    return k * (1 + SLOPE * (gamma - 1))


def independent_union(gamma: int, k: int = 8, n: int = 256) -> float:
    return n * (1 - (1 - k / n) ** gamma)


def _row(sw: Sweep, policy, gb, gamma, alpha) -> Row:
    alpha = 1.0 if gamma == 1 else alpha  # γ = 1 drafts nothing: α does not apply
    return next(
        r for r in sw.rows if (r.policy, r.gb, r.gamma, r.alpha) == (policy, gb, gamma, alpha)
    )


def synthesize(positions: int, seed: int, where: str) -> Trace:
    """The calibrated trace, written by the CLI as a user would and loaded back."""
    out = str(Path(where) / "minimax")
    argv = ["trace", "synth", out, "--like", "minimax-m2.5", "--positions", str(positions)]
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the results section
        status = specdec_main([*argv, "--seed", str(seed)])
    if status != 0:
        raise SystemExit("specdec trace synth failed")
    return load_trace(out)
