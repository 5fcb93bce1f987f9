"""`self`: cache-only self-draft, the target with each MoE layer limited to resident experts."""

from __future__ import annotations

import numpy as np

from specdec.decode.drafters.registry import DraftContext, Drafter, NoOptions, register, stack_q
from specdec.decode.rollback import CacheMark, roll_back
from specdec.decode.state import DecodeState, forward
from specdec.gamma.draft_stop import DraftStop
from specdec.stream.steplog import Call

RESIDENT_DRAFT = Call("draft", resident_only=True)  # experts not resident are dropped


@register
class SelfDrafter(Drafter):
    """Drafts with the resident experts only (gates renormalised); reads nothing."""

    name = "self"
    listed = 2  # place in help texts
    draft_compute = "main"
    routes_drafts = True  # its routers see verify's positions first (decode/draft_stop.py)

    @classmethod
    def build(cls, options: NoOptions, ctx: DraftContext) -> SelfDrafter:
        ctx.sm.family.require_route("the self drafter")  # it renormalises the router's gates
        return cls()

    def propose(
        self, st: DecodeState, n: int, stop: DraftStop | None = None
    ) -> tuple[list[int], np.ndarray | None]:
        """n drafts, or fewer where `stop` (decode/draft_stop.py) ends the draft after a step."""
        drafts, qs, tok = [], [], st.tokens[-1]
        mark = CacheMark.before(st.cache)
        steps = 0
        for step in range(n):
            tok, q = st.pick(forward(st, [tok], False, RESIDENT_DRAFT)[-1])
            drafts.append(tok)
            qs.append(q)
            steps += 1
            if stop is not None and stop.after(step):  # position `step` (draft `step`) not worth it
                drafts, qs = drafts[: step - 1], qs[: step - 1]
                break
        # the draft positions were computed without the missing experts: forget them all
        roll_back(st, mark, steps, [], False)
        return drafts, stack_q(qs)
