"""Rolling the main model's cache back past rejected drafts, for caches that cannot be trimmed.

    mark = CacheMark.before(st.cache)      # before the verify pass (None: all trimmable)
    ... verify [y, d1..dn], judge: accepted a < n ...
    refed = roll_back(st, mark, fed=n + 1, keep=[y, d1..da], want_hidden)

A KV cache is trimmed. Some caches cannot be: Qwen3-Next's gated delta-net layers (and the other
hybrids' SSM and conv layers: mlx-lm's ArraysCache) fold every position into a recurrent state,
deepseek_v41's LayerCache drops window rows and closes compressed groups, and a sliding-window
RotatingKVCache stops trimming once it has wrapped around. Their state is their attributes, so
the mark keeps a new handle on each array (`mx.array(a)`: the same data, no copy; a later write
into the cache's array, as RotatingKVCache makes, leaves the handle's values as they were, MLX
then copying instead of writing in place). On a rejection every layer goes back to before the
pass (KV caches trimmed by the whole pass, the others given their attributes back) and the
accepted prefix [y, d1..da] is fed again in one forward. A cache whose state holds other objects
(a CacheList of caches) cannot be marked: speculation refuses γ > 1 for it.

Cost, only in passes that reject a draft: one more main-model forward over accepted + 1
positions; its expert accesses are a subset of the verify pass's union, so they hit unless the
verify itself evicted them (a tight budget), and the records count them (`refed`,
`refeed_bytes_read`). A pass that accepts every draft costs nothing extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx

from specdec.core.errors import SpecdecError
from specdec.decode.state import DecodeState, feed

if TYPE_CHECKING:  # the loader imports mlx-lm (seconds): not for `--help`
    from specdec.stream.loader import StreamedModel

_VALUES = (mx.array, int, float, bool, str, type(None))


def _restorable(c) -> bool:
    """A cache whose whole state is arrays and plain values (lists of arrays included)."""
    return all(
        isinstance(v, _VALUES) or (isinstance(v, list) and all(isinstance(x, _VALUES) for x in v))
        for v in vars(c).values()
    )


def can_roll_back(cache: list) -> bool:
    """Whether rejected drafts can be undone: every layer's cache trims or can be restored."""
    return all(c.is_trimmable() or _restorable(c) for c in cache)


def check_speculation(sm: StreamedModel, gamma: int) -> None:
    """γ > 1 needs the rejected drafts rolled back; say why a model cannot.

    The one place this is decided (the decode loop asks here). Caches that cannot be trimmed but
    keep their state in arrays (linear attention, SSM, conv, deepseek_v41's compressed KV, a
    wrapped sliding window) are restored instead (CacheMark)."""
    if gamma <= 1:
        return
    from mlx_lm.models.cache import (
        make_prompt_cache,
    )  # here: mlx-lm takes seconds to import (--help)

    cache = make_prompt_cache(sm.model)
    if not can_roll_back(cache):
        fixed = sorted({type(c).__name__ for c in cache if not c.is_trimmable()})
        raise SpecdecError(
            f"{sm.config.get('model_type')} keeps state that can be neither trimmed nor "
            f"restored ({', '.join(fixed)}), so rejected drafts cannot be rolled back: use "
            f"--gamma 1 (got {gamma})"
        )


@dataclass(frozen=True)
class CacheMark:
    """The untrimmable layers' attributes at one point: {layer index: {name: value}}."""

    states: dict[int, dict]

    @classmethod
    def before(cls, cache: list) -> CacheMark | None:
        """A mark to return to, or None when every layer trims (nothing to keep)."""
        from mlx_lm.models.cache import can_trim_prompt_cache

        if can_trim_prompt_cache(cache):
            return None
        if not can_roll_back(cache):
            kinds = sorted({type(c).__name__ for c in cache if not c.is_trimmable()})
            raise SpecdecError(
                f"the cache ({', '.join(kinds)}) can be neither trimmed nor restored, so "
                "rejected drafts cannot be rolled back: use --gamma 1"
            )
        return cls({i: _kept(vars(c)) for i, c in enumerate(cache) if not c.is_trimmable()})

    def restore(self, cache: list, fed: int) -> None:
        """Every layer back to the mark: the last `fed` positions trimmed or forgotten."""
        for i, c in enumerate(cache):
            if i in self.states:
                vars(c).update(_kept(self.states[i]))
            else:
                c.trim(fed)


def _handle(v):
    """A new handle on an array (same data: a write through the old one does not reach it)."""
    return mx.array(v) if isinstance(v, mx.array) else v


def _kept(attrs: dict) -> dict:
    """The attribute values, each array (also in a list) through a new handle."""
    return {
        k: [_handle(x) for x in v] if isinstance(v, list) else _handle(v) for k, v in attrs.items()
    }


def roll_back(
    st: DecodeState, mark: CacheMark | None, fed: int, keep: list[int], want_hidden: bool
) -> int:
    """Forget the rejected positions of the last `fed`; returns the positions fed again."""
    rejected = fed - len(keep)
    if rejected <= 0:
        return 0
    if mark is None:
        from mlx_lm.models.cache import trim_prompt_cache

        trim_prompt_cache(st.cache, rejected)
        return 0
    mark.restore(st.cache, fed)
    if keep:
        # st.hidden: rows for `keep`, as the drafter reads them
        feed(st, keep, want_hidden)
    return len(keep)
