"""The form a verify pass computes its positions in: as one-token decoding does, or the family's own.

    form = VerifyForm.install(sm.model, "decode")   # once, after loading
    with form.verifying():                          # a verify pass's forward (and its re-feed)
        logits = model(x, cache=cache)              # each position as a one-token call gives it

Some mlx-lm families compute attention differently at one position than at several: the MLA
families (deepseek_v3, deepseek_v32, glm4_moe_lite, kimi_linear, mistral4, ...) take the absorbed
path at `L == 1` (`embed_q` on the query, attention over the latent, `unembed_out` on the output)
and the expanded path otherwise (`embed_q` / `unembed_out` on the whole latent cache); linear
attention (bailing_hybrid) takes a recurrent step at `L == 1` and a chunked scan otherwise. Same
mathematics, other rounding — and with quantized weights other kernels: a verify pass of γ
positions then scores a draft with logits plain decoding never computes, and where the top two
are close the argmax flips (issue 24: 0.78 apart on one backend, top two 0.0117 apart).

The decode form runs each decoder layer's token mixer (its attention, or SSM / linear attention:
every direct child of a layer called as (x, mask, cache); a mixer that takes more, as hunyuan's
shared KV states or deepseek_v41's start position, stays native) once per position, in order, each a
one-token call of the family's own code with the mask a one-token decode call gets (None at
batch 1): the absorbed MLA path at every position, the same kernels on the same shapes as
plain decoding, so attention's outputs equal decoding's bit for bit. The rest of the layer
(norms, projections, the MoE block and its expert reads) still sees all γ positions in one
call, so a pass reads the union of its positions' experts once, as before. What remains
position-count dependent (a BLAS that sums rows in another order, docs/results/lossless.md)
is measured, not assumed away. The cost: γ small attention calls per layer instead of one
(each reads the KV cache again), against expert reads from disk.

The native form leaves every call as the family wrote it (`--verify-form native`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from specdec.core.errors import SpecdecError

FORMS = ("decode", "native")
_MASK_NAMES = ("mask", "attention_mask")


def _positionwise_ok(cls: type) -> bool:
    """A mixer called as (x, mask?, cache): anything else it takes (hunyuan's shared KV states,
    deepseek_v41's start position) would need its own per-position slicing, so it runs native."""
    params = list(inspect.signature(cls.__call__).parameters)[2:]  # after self and x
    return "cache" in params and set(params) <= {"cache", *_MASK_NAMES}


class _Positionwise:
    """Mixed into a token mixer's class: while `_decode_form` is on, an L-position call is L
    one-position calls of the family's own `__call__`, in order, through the same cache."""

    _decode_form = False

    def __call__(self, x: mx.array, *args, **kwargs) -> mx.array:
        if not self._decode_form or x.ndim != 3 or x.shape[1] == 1:  # x: [B, L, D]
            return super().__call__(x, *args, **kwargs)
        # per layer per verify pass: the signature is the class's, taken once (_positionwise_class)
        bound = self._mixer_signature.bind(self, x, *args, **kwargs)
        for name in _MASK_NAMES:  # a one-token decode call's mask at batch 1
            if name in bound.arguments:
                bound.arguments[name] = None
        outs = []
        for i in range(x.shape[1]):
            bound.arguments[self._x_name] = x[:, i : i + 1]  # [B, 1, D]
            outs.append(super().__call__(*bound.args[1:], **bound.kwargs))
        return mx.concatenate(outs, axis=1)  # [B, L, D]


_CLASSES: dict[type, type] = {}


def _positionwise_class(cls: type) -> type:
    if cls not in _CLASSES:
        signature = inspect.signature(cls.__call__)  # self, x, ...
        _CLASSES[cls] = type(
            f"Positionwise{cls.__name__}",
            (_Positionwise, cls),
            {"_mixer_signature": signature, "_x_name": list(signature.parameters)[1]},
        )
    return _CLASSES[cls]


def token_mixers(model: nn.Module) -> list[nn.Module]:
    """Each decoder layer's direct children called as (x, mask, cache): what mixes positions."""
    layers = getattr(model, "layers", None) or []
    return [
        child
        for layer in layers
        for child in layer.children().values()
        if isinstance(child, _Positionwise)
        or (isinstance(child, nn.Module) and _positionwise_ok(type(child)))
    ]


@dataclass
class VerifyForm:
    """Which form verify passes take; `verifying()` turns the decode form on for one call."""

    form: str = "decode"
    mixers: list[nn.Module] = field(default_factory=list)

    @classmethod
    def install(cls, model: nn.Module, form: str = "decode") -> VerifyForm:
        """Ready `model`'s token mixers for `form`; idempotent (a model is loaded once)."""
        if form not in FORMS:
            raise SpecdecError(f"verify form {form!r}: use {' or '.join(FORMS)}")
        mixers = token_mixers(model) if form == "decode" else []
        for m in mixers:
            if not isinstance(m, _Positionwise):
                m.__class__ = _positionwise_class(type(m))
        return cls(form, mixers)

    @contextlib.contextmanager
    def verifying(self) -> Iterator[None]:
        for m in self.mixers:
            m._decode_form = True
        try:
            yield
        finally:
            for m in self.mixers:
                m._decode_form = False
