"""`mtp`: the model's multi-token-prediction module as the drafter (its experts stream).

Layouts: DeepSeek-V3's (deepseek_v3, deepseek_v32, kimi_k25, glm4_moe) and Qwen3-Next's
(specdec.checkpoint.mtp.mtp_class)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from specdec.core.errors import SpecdecError
from specdec.decode.drafters.registry import DraftContext, Drafter, NoOptions, register, stack_q
from specdec.decode.sampling import Verdict
from specdec.decode.state import DecodeState


@register
class MTPDrafter(Drafter):
    """MTP: position i's hidden state and token i+1 predict token i+2.

    After each pass the module first catches up on the newly committed positions (hidden states
    of the verify pass, rows 0..accepted), which gives the first draft; further drafts chain the
    module on its own output hidden state, as DeepSeek-V3 inference reuses its one module. Those
    chained positions are trimmed from its KV cache before the next catch-up. A catch-up runs
    the module's attention over every new position (its KV cache) and its MoE on the last one
    alone, the only output a draft uses: it reads one position's experts. A pass that drafts
    nothing (`--gamma auto` chose plain) runs no catch-up: its positions wait, with those before
    them, for the next pass that drafts, so the module's KV cache never skips a position. All of
    its expert reads land in the draft phase.
    """

    name = "mtp"
    listed = 1  # place in help texts
    needs_mtp = True
    needs_hidden = True
    draft_compute = "mtp"

    def __init__(self, mtp, model):
        self.mtp = mtp
        from specdec.checkpoint.mtp import target_io  # here: it imports mlx-lm (seconds)

        self.embed, self.head = target_io(model)  # shared with the main model in every layout
        self.cache = None
        self.pending: tuple[mx.array, list[int]] | None = None  # (hidden [1,T,H], next tokens)
        self.chained = 0

    @classmethod
    def build(cls, options: NoOptions, ctx: DraftContext) -> MTPDrafter:
        sm = ctx.sm
        if sm.mtp is None:
            raise SpecdecError(
                f"drafter mtp: {sm.path} has no MTP weights (mtp.safetensors); use a model with an "
                "MTP module (specdec extract-mtp HF_DIR OUT) or another drafter (self, lookup)"
            )
        return cls(sm.mtp, sm.model)

    def start(self, st: DecodeState) -> None:
        self.cache = self.mtp.make_cache()
        self.pending = (st.hidden, st.tokens[1:])  # prompt positions 0..P-1 -> tokens 1..P

    def _run(self, hidden: mx.array, tokens: list[int]) -> tuple[np.ndarray, mx.array]:
        """The module over these positions: the last one's logits and output state."""
        logits, h = self.mtp(
            hidden,
            mx.array([tokens]),
            cache=self.cache,
            embed=self.embed,
            head=self.head,
            last=True,  # a catch-up's earlier positions feed the KV cache; their MoE is not read
        )
        return np.array(logits[0, 0].astype(mx.float32)), h  # h: [1, 1, (hc,) H]

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        if n == 0:
            self.chained = 0
            return [], None
        hidden, toks = self.pending
        self.pending = None  # caught up
        logits, h = self._run(hidden, toks)
        drafts, qs = [], []
        for j in range(n):
            tok, q = st.pick(logits)
            drafts.append(tok)
            qs.append(q)
            if j < n - 1:
                logits, h = self._run(h, [tok])
        self.chained = n - 1
        return drafts, stack_q(qs)

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        if self.chained:
            self.cache.trim(self.chained)  # one KVCache: the module has one attention layer
        n = verdict.accepted
        rows, toks = st.hidden[:, : n + 1], verdict.tokens  # rows y, d1..dn -> d1..dn, t
        if self.pending is not None:  # a pass that drafted nothing: not caught up yet
            rows = mx.concatenate([self.pending[0], rows], axis=1)  # [1, T, (hc,) H]
            toks = self.pending[1] + toks
        self.pending = (rows, toks)
