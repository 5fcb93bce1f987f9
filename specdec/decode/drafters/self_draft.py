"""`self`: cache-only self-draft, the target with each MoE layer limited to resident experts."""

from __future__ import annotations

import numpy as np
from mlx_lm.models.cache import trim_prompt_cache

from specdec.decode.drafters.registry import DraftContext, Drafter, NoOptions, register, stack_q
from specdec.decode.state import DecodeState, forward
from specdec.model.steplog import Call

RESIDENT_DRAFT = Call("draft", resident_only=True)  # experts not resident are dropped


@register
class SelfDrafter(Drafter):
    """Drafts with the resident experts only (gates renormalised); reads nothing."""

    name = "self"
    draft_compute = "main"

    @classmethod
    def build(cls, options: NoOptions, ctx: DraftContext) -> SelfDrafter:
        ctx.sm.family.require_route("the self drafter")  # it renormalises the router's gates
        return cls()

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        drafts, qs, tok = [], [], st.tokens[-1]
        for _ in range(n):
            tok, q = st.pick(forward(st, [tok], False, RESIDENT_DRAFT)[-1])
            drafts.append(tok)
            qs.append(q)
        if n:
            trim_prompt_cache(st.cache, n)  # draft KV was computed without the missing experts
        return drafts, stack_q(qs)
