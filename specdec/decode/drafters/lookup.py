"""`lookup`: prompt lookup, continue the latest earlier occurrence of the trailing n-gram."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.decode.drafters.registry import DraftContext, Drafter, register
from specdec.decode.state import DecodeState


@dataclass(frozen=True)
class LookupOptions:
    max_ngram: int = 3  # longest trailing n-gram looked up (then n - 1, ..., 1)

    def __post_init__(self):
        if not isinstance(self.max_ngram, int) or self.max_ngram < 1:
            raise SpecdecError(
                f"drafter lookup: max_ngram must be an integer >= 1 (got {self.max_ngram!r})"
            )


@register
class LookupDrafter(Drafter):
    """No model: the continuation of the trailing n-gram's latest earlier occurrence."""

    name = "lookup"
    listed = 3  # place in help texts
    Options = LookupOptions

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram

    @classmethod
    def build(cls, options: LookupOptions, ctx: DraftContext) -> LookupDrafter:
        return cls(options.max_ngram)

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        toks = st.tokens
        if n == 0:
            return [], None
        for size in range(self.max_ngram, 0, -1):
            if len(toks) <= size:
                continue
            tail = toks[-size:]
            for start in range(len(toks) - size - 1, -1, -1):
                if toks[start : start + size] == tail:
                    cont = toks[start + size : start + size + n]
                    return (cont + [cont[-1]] * (n - len(cont)))[:n], None
        return [toks[-1]] * n, None
