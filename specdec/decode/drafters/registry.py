"""Drafters found by name, as mlx-lm finds a model family by its `model_type`.

A drafter is one module of this package: a `Drafter` subclass decorated with `@register`, with
its `name`, an `Options` dataclass (validated in its `__post_init__`), the option its short form
sets (`arg`: `oracle:0.9` sets `alpha`), what it needs from the run (`needs_mtp`,
`needs_reference`, `needs_hidden`), what the clock charges for its drafts (`draft_compute`) and a
`build(options, ctx)` classmethod; plus its
conf/drafter/NAME.yaml for specdec-exp. Nothing else changes to add one.

A `DrafterSpec` (name + options) is made once at the edge, from the command line's
`--drafter oracle:0.9` (`DrafterSpec.parse`) or from Hydra's `drafter` group
(`DrafterSpec.from_fields`), and travels as is; `str(spec)` is its one label (`oracle:0.9`,
`oracle:1`), written into records and run directories and read back by the reports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.registry import Registry
from specdec.decode.sampling import Verdict
from specdec.decode.state import DecodeState


@dataclass(frozen=True)
class NoOptions:
    """Drafters without settings."""


@dataclass(frozen=True)
class DraftContext:
    """What a drafter may take from the run when it is built."""

    sm: Any  # the loaded StreamedModel
    reference: list[int] | None = None  # plain greedy continuation (needs_reference drafters)
    seed: int = 0


class Drafter:
    """Base drafter: proposes nothing (γ = 1 behaviour whatever γ says).

    Interface: `start(st)` after the prefill, `propose(st, n) -> (tokens, q or None)`, and
    `commit(st, drafts, verdict)` after each verify pass so the drafter can roll its state back.
    """

    name = "none"
    listed = 0  # place in help texts (lowest first)
    Options: type = NoOptions
    arg: str | None = None  # the option the short form `NAME:VALUE` sets
    usage = ""  # the short form for messages, e.g. "oracle:ALPHA"
    needs_mtp = False  # the loader must load the model's MTP module
    needs_reference = False  # build needs the plain greedy continuation (a plain run first)
    needs_hidden = False  # the loop keeps the main model's final hidden states
    # what one draft runs on the device, for the clock (specdec.clock.passes): "main" (the main
    # model over resident experts), "model" (its own model: `model_config()`), "mtp" (the MTP
    # layer) or "none"
    draft_compute = "none"
    # its draft forwards route verify's positions, and `propose(st, n, stop)` takes a
    # decode.draft_stop.DraftStop to end a draft early (`self`)
    routes_drafts = False
    # after propose: how many leading drafts it knows to be right (the oracle), else None; given
    # routing (decode/trace_routing.py) routes the positions after them as rejected drafts
    planned: int | None = None

    @classmethod
    def build(cls, options, ctx: DraftContext) -> Drafter:
        return cls()

    def start(self, st: DecodeState) -> None:
        pass

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        return [], None

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        pass


def stack_q(qs: list[np.ndarray | None]) -> np.ndarray | None:
    """The drafts' distributions [n, V], or None when drafted greedily."""
    return None if not qs or qs[0] is None else np.stack(qs)  # [n, V]


DRAFTERS = Registry("drafter")
register = DRAFTERS.register


def drafter_forms(order: str = "name") -> list[str]:
    """Every drafter's short form (`oracle:ALPHA`), by name or ("listed") in help-text order."""
    if order == "listed":
        kinds = sorted(DRAFTERS.values(), key=lambda c: (c.listed, c.name))
    else:
        kinds = sorted(DRAFTERS.values(), key=lambda c: c.name)
    return [c.usage or c.name for c in kinds]


def drafter_usage() -> str:
    """`draft:PATH, lookup, ... or self`: what an error about an unknown drafter lists."""
    forms = drafter_forms()
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def drafting_usage() -> str:
    """The drafters that draft (all but `none`), for an error that asks for one."""
    return ", ".join(f for f in drafter_forms() if f != "none")


def _kind(name: str, text: str) -> type[Drafter]:
    if name not in DRAFTERS:
        raise SpecdecError(f"unknown drafter {text!r}: use {drafter_usage()}")
    return DRAFTERS[name]


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter, with its options: parsed once at the edge, then passed as is."""

    name: str = "none"
    options: Any = dataclasses.field(default_factory=NoOptions)

    @classmethod
    def parse(cls, text: str) -> DrafterSpec:
        """The command line's form: `none`, `mtp`, `oracle:0.9`, `draft:PATH`, ..."""
        name, colon, value = text.partition(":")
        kind = _kind(name, text)
        if kind.arg is None:
            if colon:
                raise SpecdecError(f"drafter {text!r}: {name} takes no value, write {name}")
            return cls(name, kind.Options())
        return cls(name, kind.Options(**{kind.arg: value}))

    @classmethod
    def from_fields(cls, fields: dict) -> DrafterSpec:
        """Hydra's `drafter` group: {name: oracle, alpha: 0.9}."""
        fields = dict(fields)
        name = str(fields.pop("name", "none"))
        kind = _kind(name, name)
        known = {f.name for f in dataclasses.fields(kind.Options)}
        extra = sorted(set(fields) - known)
        if extra:
            raise SpecdecError(
                f"drafter={name} has no option {', '.join(extra)} (it takes "
                f"{', '.join(sorted(known)) or 'none'}): drop drafter.{extra[0]}"
            )
        return cls(name, kind.Options(**fields))

    @property
    def kind(self) -> type[Drafter]:
        return DRAFTERS[self.name]

    @property
    def needs_mtp(self) -> bool:
        return self.kind.needs_mtp

    @property
    def needs_reference(self) -> bool:
        return self.kind.needs_reference

    def __str__(self) -> str:
        """The label: the short form, with a number written as `%g` (`oracle:1`, not 1.0)."""
        arg = self.kind.arg
        if arg is None:
            return self.name
        value = getattr(self.options, arg)
        return f"{self.name}:{value:g}" if isinstance(value, float) else f"{self.name}:{value}"

    def build(self, sm, reference: list[int] | None = None, seed: int = 0) -> Drafter:
        """The drafter for one run on `sm`."""
        if self.needs_reference and reference is None:
            raise SpecdecError(f"the {self.name} drafter needs the plain greedy continuation")
        return self.kind.build(self.options, DraftContext(sm, reference, seed))
