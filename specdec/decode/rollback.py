"""Rolling the main model's cache back past rejected drafts, for caches that cannot be trimmed.

    mark = CacheMark.before(st.cache)      # before the verify pass (None: all trimmable)
    ... verify [y, d1..dn], judge: accepted a < n ...
    refed = roll_back(st, mark, fed=n + 1, keep=[y, d1..da], want_hidden)

A KV cache is trimmed. Two cache kinds cannot be: Qwen3-Next's gated delta-net layers keep a
recurrent state (mlx-lm's ArraysCache: the conv window and the delta-rule state) that folds every
position in, and deepseek_v41's LayerCache drops window rows and closes compressed groups as
positions arrive. Both only ever rebind their attributes to new arrays (never write into one), so
keeping the attribute values before the verify pass is a snapshot by reference (no copy; a few MB
per layer at real size). On a rejection every layer goes back to before the pass (KV caches
trimmed by the whole pass, the others restored) and the accepted prefix [y, d1..da] is fed again
in one forward.

Cost, only in passes that reject a draft: one more main-model forward over accepted + 1
positions; its expert accesses are a subset of the verify pass's union, so they hit unless the
verify itself evicted them (a tight budget), and the records count them (`refed`,
`refeed_bytes_read`). A pass that accepts every draft costs nothing extra.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlx_lm.models.cache import ArraysCache, can_trim_prompt_cache, trim_prompt_cache
from mlx_lm.models.deepseek_v41 import LayerCache

from specdec.decode.state import DecodeState, forward
from specdec.errors import SpecdecError

# Caches whose updates only rebind attributes (ArraysCache assigns list entries), so their
# attribute values are a snapshot. A cache that writes into its arrays (KVCache, a full
# RotatingKVCache) is not one: it must trim, or speculation refuses γ > 1.
_KEPT_BY_REFERENCE = (ArraysCache, LayerCache)


def can_roll_back(cache: list) -> bool:
    """Whether rejected drafts can be undone: every layer's cache trims or is kept by reference."""
    return all(c.is_trimmable() or isinstance(c, _KEPT_BY_REFERENCE) for c in cache)


@dataclass(frozen=True)
class CacheMark:
    """The untrimmable layers' attributes at one point: {layer index: {name: value}}."""

    states: dict[int, dict]

    @classmethod
    def before(cls, cache: list) -> CacheMark | None:
        """A mark to return to, or None when every layer trims (nothing to keep)."""
        if can_trim_prompt_cache(cache):
            return None
        if not can_roll_back(cache):  # e.g. a sliding-window cache that has wrapped around
            kinds = sorted({type(c).__name__ for c in cache if not c.is_trimmable()})
            raise SpecdecError(
                f"the cache ({', '.join(kinds)}) can no longer be trimmed (a sliding window "
                "that has filled), so rejected drafts cannot be rolled back: use --gamma 1"
            )
        return cls({i: _kept(vars(c)) for i, c in enumerate(cache) if not c.is_trimmable()})

    def restore(self, cache: list, fed: int) -> None:
        """Every layer back to the mark: the last `fed` positions trimmed or forgotten."""
        for i, c in enumerate(cache):
            if i in self.states:
                vars(c).update(_kept(self.states[i]))
            else:
                c.trim(fed)


def _kept(attrs: dict) -> dict:
    """The attribute values, lists copied (ArraysCache assigns into its entry list)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in attrs.items()}


def roll_back(
    st: DecodeState, mark: CacheMark | None, fed: int, keep: list[int], want_hidden: bool
) -> int:
    """Forget the rejected positions of the last `fed`; returns the positions fed again."""
    rejected = fed - len(keep)
    if rejected <= 0:
        return 0
    if mark is None:
        trim_prompt_cache(st.cache, rejected)
        return 0
    mark.restore(st.cache, fed)
    if keep:
        forward(st, keep, want_hidden)  # st.hidden: rows for `keep`, as the drafter reads them
    return len(keep)
