"""`oracle:α`: acceptance-controlled drafts for calibrated sweeps (greedy decoding only)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.decode.drafters.registry import DraftContext, Drafter, register
from specdec.decode.state import DecodeState


@dataclass(frozen=True)
class OracleOptions:
    alpha: float  # per-draft acceptance, in [0, 1]

    def __post_init__(self):
        try:
            alpha = float(self.alpha)  # `oracle:0.9` hands the text over
        except (TypeError, ValueError):
            alpha = math.nan
        if not 0 <= alpha <= 1:  # also NaN
            raise SpecdecError(
                f"drafter oracle: alpha {self.alpha!r} is not a number in [0, 1]: write "
                "oracle:ALPHA with 0 <= ALPHA <= 1, e.g. oracle:0.9"
            )
        object.__setattr__(self, "alpha", alpha)


@register
class OracleDrafter(Drafter):
    """Draft j of a pass proposes the target's greedy token at that position (known from a plain
    run, `reference`) with probability α, otherwise a different token; so each judged draft is
    accepted with probability α, and the rejected ones route wherever a wrong token routes.
    """

    name = "oracle"
    listed = 4  # place in help texts
    Options = OracleOptions
    arg = "alpha"
    usage = "oracle:ALPHA"
    needs_reference = True

    def __init__(self, alpha: float, reference: list[int], vocab_size: int, seed: int = 0):
        self.alpha, self.reference, self.vocab = alpha, reference, vocab_size
        self.rng = np.random.default_rng(seed + 7919)

    @classmethod
    def build(cls, options: OracleOptions, ctx: DraftContext) -> OracleDrafter:
        vocab = int(ctx.sm.model.args.vocab_size)
        return cls(options.alpha, ctx.reference, vocab, ctx.seed)

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        if st.temp != 0:
            raise SpecdecError("the oracle drafter needs greedy decoding (--temp 0)")
        m = st.n_generated
        out = []
        self.planned = n  # the drafts before the first wrong one are right
        for j in range(n):
            i = m + j
            truth = self.reference[i] if i < len(self.reference) else None
            if truth is not None and self.rng.random() < self.alpha:
                out.append(truth)
            else:
                other = int(self.rng.integers(self.vocab - 1))
                out.append(other + (truth is not None and other >= truth))
                self.planned = min(self.planned, j) if self.planned is not None else j
        return out, None
