"""The form a verify pass computes its positions in: as one-token decoding does, or the family's own.

    form = VerifyForm.install(sm.model, "decode")   # once, after loading
    with form.verifying():                          # a verify pass's forward (and its re-feed)
        logits = model(x, cache=cache)              # each position as a one-token call gives it
    python -m analysis.lossless                     # the forms compared on every family

Some mlx-lm families compute attention differently at one position than at several: the MLA
families (deepseek_v3, deepseek_v32, glm4_moe_lite, kimi_linear, mistral4, ...) take the absorbed
path at `L == 1` (`embed_q` on the query, attention over the latent, `unembed_out` on the output)
and the expanded path otherwise (`embed_q` / `unembed_out` on the whole latent cache); linear
attention (bailing_hybrid) takes a recurrent step at `L == 1` and a chunked scan otherwise. Same
mathematics, other rounding — and with quantized weights other kernels: a verify pass of γ
positions then scores a draft with logits plain decoding never computes, and where the top two
are close the argmax flips (issue 24: 0.78 apart on one backend, top two 0.0117 apart).

The decode form computes every position of a verify pass as a one-token call computes it.
Each decoder layer's token mixer (its attention, or SSM / linear attention: every direct child of
a layer called as (x, mask, cache); a mixer that takes more, as hunyuan's shared KV states or
deepseek_v41's start position, stays native) runs once per position, in order, each a one-token
call of the family's own code with the mask a one-token decode call gets (None at batch 1): the
absorbed MLA path at every position. Every other module a layer calls on its positions (a dense
MLP; an MoE block's router gate and shared experts; one called with more than x stays native)
and the LM head run per position too, as one-row calls: a matmul's kernel depends on its row count (a CPU BLAS sums a 4-row product in
another order than a 1-row one; MLX's CUDA backend takes qmm for several rows, qmv for one), so
a batched call is not the one-token call's arithmetic. The streamed MoE switch keeps one cache
step for the union of its positions' experts — a pass still reads the union once — and computes
each position's experts in a call of its own (specdec.stream.streamed). Row-wise operations
(norms, activations, the gate's weighting) are left batched: each row's result does not depend
on the others. So the logits of a verify pass equal one-token decoding's bit for bit on every
backend whose kernels are deterministic for a given shape. The cost: γ small calls per module
instead of one (each reads the module's weights again, from memory), against expert reads from
disk; measured on the bundled model at 25%, γ 4, 96 tokens, this 2-core CPU: 8-9% fewer tokens
per second than the native form (self 124 vs 135, mtp 107 vs 115; medians of 3).

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

    @staticmethod
    def _class_attrs(cls: type) -> dict:
        """The mixer's call signature, taken once per class: each call is rebound by it."""
        signature = inspect.signature(cls.__call__)  # self, x, ...
        return {"_mixer_signature": signature, "_x_name": list(signature.parameters)[1]}

    def __call__(self, x: mx.array, *args, **kwargs) -> mx.array:
        if not self._decode_form or x.ndim != 3 or x.shape[1] == 1:  # x: [B, L, D]
            return super().__call__(x, *args, **kwargs)
        # per layer per verify pass: the signature is the class's, taken once (_mixed_class)
        bound = self._mixer_signature.bind(self, x, *args, **kwargs)
        for name in _MASK_NAMES:  # a one-token decode call's mask at batch 1
            if name in bound.arguments:
                bound.arguments[name] = None
        outs = []
        for i in range(x.shape[1]):
            bound.arguments[self._x_name] = x[:, i : i + 1]  # [B, 1, D]
            outs.append(super().__call__(*bound.args[1:], **bound.kwargs))
        return mx.concatenate(outs, axis=1)  # [B, L, D]


class _Rowwise:
    """Mixed into a module called on x [B, L, D] alone (a dense MLP, a router gate, shared
    experts, an LM head): while `_decode_form` is on, an L-position call is L one-position
    calls, concatenated (each output, where it returns several: a gate's indices and scores)."""

    _decode_form = False
    _class_attrs = staticmethod(lambda cls: {})  # a row-wise call needs nothing of its class

    # every decode call of these modules passes here: outside a verify pass one attribute test,
    # 0.24 µs a call over the plain module's 1.64 of graph building (this CPU)
    def __call__(self, x: mx.array, *args, **kwargs) -> mx.array | tuple[mx.array, ...]:
        # called with more than x (extras it may slice by position): native
        if self._decode_form and not (args or kwargs):
            return _per_row(super().__call__, x)
        return super().__call__(x, *args, **kwargs)

    def as_linear(self, x: mx.array) -> mx.array:
        """A tied LM head (an embedding used as the output projection), one row at a time."""
        return _per_row(super().as_linear, x) if self._decode_form else super().as_linear(x)


def _per_row(call, x: mx.array):
    """call(x) [B, L, D] as L one-position calls, joined (one call where L is 1)."""
    if x.ndim != 3 or x.shape[1] == 1:
        return call(x)
    return _concat([call(x[:, i : i + 1]) for i in range(x.shape[1])])


def _concat(outs: list) -> mx.array | tuple[mx.array, ...]:
    """Per-position outputs [B, 1, ...] joined on the position axis (a tuple: each part)."""
    if isinstance(outs[0], tuple):
        return tuple(mx.concatenate(parts, axis=1) for parts in zip(*outs, strict=True))
    return mx.concatenate(outs, axis=1)


_CLASSES: dict[tuple[type, type], type] = {}


def _mixed_class(mixin: type, cls: type) -> type:
    """`cls` with `mixin` in front (one class per pair, made once, with what the mixin keeps of
    the class: `_class_attrs`)."""
    if (mixin, cls) not in _CLASSES:
        name = f"{mixin.__name__.strip('_')}{cls.__name__}"
        _CLASSES[mixin, cls] = type(name, (mixin, cls), mixin._class_attrs(cls))
    return _CLASSES[mixin, cls]


def _takes_x_alone(m: nn.Module) -> bool:
    """Called on x alone (what else it takes has defaults); made row-wise already counts."""
    if isinstance(m, _Rowwise):
        return True
    params = list(inspect.signature(type(m).__call__).parameters.values())[2:]
    return all(p.default is not inspect.Parameter.empty for p in params)


_ROW_INDEPENDENT = (nn.RMSNorm, nn.LayerNorm)  # each row's result depends on that row alone


def _children(module: nn.Module) -> list:
    """A module's direct children, those held in a list (longcat_flash's two attentions and two
    MLPs a layer) one by one."""
    out = []
    for child in module.children().values():
        out += child if isinstance(child, (list, tuple)) else [child]
    return out


def row_modules(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """(modules run per position by `_Rowwise`, streamed switches that compute per position
    themselves): each layer's children but its token mixers and norms — inside an MoE block,
    its children but the switch being streamed — and the LM head (or the tied embedding)."""
    rows, switches = [], []
    for layer in getattr(model, "layers", None) or []:
        for child in _children(layer):
            if not isinstance(child, nn.Module) or isinstance(child, _ROW_INDEPENDENT):
                continue
            if isinstance(child, _Positionwise) or _positionwise_ok(type(child)):
                continue  # a token mixer
            inner = [c for c in _children(child) if isinstance(c, nn.Module)]
            streamed = [c for c in inner if getattr(type(c), "streams_experts", False)]
            if streamed:  # an MoE block on the expert cache: one cache step for the union
                switches += streamed
                rows += [
                    c for c in inner if not any(c is t for t in streamed) and _takes_x_alone(c)
                ]
            elif _takes_x_alone(child):
                rows.append(child)
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Module):
        rows.append(head)
    else:  # tied: the embedding's as_linear is the head
        rows += [m for _, m in model.named_modules() if hasattr(m, "as_linear")][:1]
    return rows, switches


def token_mixers(model: nn.Module) -> list[nn.Module]:
    """Each decoder layer's direct children called as (x, mask, cache): what mixes positions."""
    layers = getattr(model, "layers", None) or []
    return [
        child
        for layer in layers
        for child in _children(layer)
        if isinstance(child, _Positionwise)
        or (isinstance(child, nn.Module) and _positionwise_ok(type(child)))
    ]


@dataclass
class VerifyForm:
    """Which form verify passes take; `verifying()` turns the decode form on for one call."""

    form: str = "decode"
    mixers: list[nn.Module] = field(default_factory=list)  # per position, through the cache
    rows: list[nn.Module] = field(default_factory=list)  # per position, x alone
    switches: list[nn.Module] = field(default_factory=list)  # streamed: per position inside

    @classmethod
    def install(cls, model: nn.Module, form: str = "decode") -> VerifyForm:
        """Ready `model`'s token mixers for `form`; idempotent (a model is loaded once)."""
        if form not in FORMS:
            raise SpecdecError(f"verify form {form!r}: use {' or '.join(FORMS)}")
        if form == "native":
            return cls(form)
        mixers = token_mixers(model)
        rows, switches = row_modules(model)
        for mixin, mods in ((_Positionwise, mixers), (_Rowwise, rows)):
            for m in mods:
                if not isinstance(m, mixin):
                    m.__class__ = _mixed_class(mixin, type(m))
        return cls(form, mixers, rows, switches)

    @contextlib.contextmanager
    def verifying(self) -> Iterator[None]:
        every = [*self.mixers, *self.rows, *self.switches]
        for m in every:
            m._decode_form = True
        try:
            yield
        finally:
            for m in every:
                m._decode_form = False
