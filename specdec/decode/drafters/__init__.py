"""Drafters: each proposes γ−1 tokens per pass (with their distributions when sampling).

    none         γ = 1, plain decoding                                          (none.py)
    mtp          the model's MTP module (DeepSeek-V3, GLM-4.5 or Qwen3-Next layout);
                 chained for γ−1 > 1; its experts stream                        (mtp.py)
    self         the target restricted to resident experts; reads nothing        (self_draft.py)
    draft:PATH   a small resident mlx-lm model with the same tokenizer            (draft_model.py)
    lookup       prompt / n-gram lookup, no model                                (lookup.py)
    oracle:α     the target's greedy token with probability α, another otherwise (oracle.py)

    spec = DrafterSpec.parse("oracle:0.9")   # at the edge, once
    drafter = spec.build(sm, reference, seed)

Every module of this package is imported here, so a drafter registers itself by being a file in
it (registry.py says what the file holds).
"""

from __future__ import annotations

from specdec.core.registry import import_package
from specdec.decode.drafters.registry import (
    DRAFTERS,
    DraftContext,
    Drafter,
    DrafterSpec,
    NoOptions,
    drafter_forms,
    drafter_usage,
    drafting_usage,
    register,
    stack_q,
)

import_package(__name__, __path__, skip=("registry",))

__all__ = [
    "DRAFTERS",
    "DraftContext",
    "Drafter",
    "DrafterSpec",
    "NoOptions",
    "drafter_forms",
    "drafter_usage",
    "drafting_usage",
    "register",
    "stack_q",
]
