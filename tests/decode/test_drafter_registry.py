"""Drafters are found by name; a spec is parsed once and keeps one label.

pytest tests/decode/test_drafter_registry.py
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specdec.core.errors import SpecdecError
from specdec.decode.drafters import DRAFTERS, Drafter, DrafterSpec, register


def test_every_conf_drafter_is_registered():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[2] / "conf" / "drafter"
    assert {p.stem for p in conf.glob("*.yaml")} == set(DRAFTERS)


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("oracle:1.0", {"name": "oracle", "alpha": 1}),
        ("oracle:0.90", {"name": "oracle", "alpha": 0.9}),
        ("draft:models/small", {"name": "draft", "path": "models/small"}),
        ("mtp", {"name": "mtp"}),
    ],
)
def test_command_line_and_hydra_give_one_spec_and_label(text, fields):
    a, b = DrafterSpec.parse(text), DrafterSpec.from_fields(fields)
    assert a == b and str(a) == str(b)
    assert str(DrafterSpec.parse(str(a))) == str(a)  # the label parses back to the same spec


def test_labels_agree_for_the_oracle():
    assert str(DrafterSpec.parse("oracle:1.0")) == str(DrafterSpec.parse("oracle:1")) == "oracle:1"


def test_needs_come_from_the_registration():
    assert DrafterSpec.parse("mtp").needs_mtp and not DrafterSpec.parse("self").needs_mtp
    assert DrafterSpec.parse("oracle:0.5").needs_reference
    assert DRAFTERS["mtp"].needs_hidden and not DRAFTERS["lookup"].needs_hidden


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("telepathy", "unknown drafter 'telepathy'"),
        ("oracle:nan", "not a number in [0, 1]"),
        ("oracle:1.5", "not a number in [0, 1]"),
        ("draft:", "needs a model"),
        ("self:3", "self takes no value"),
    ],
)
def test_bad_specs_are_one_line_errors(text, message):
    with pytest.raises(SpecdecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DrafterSpec.parse(text)


def test_hydra_fields_are_checked_against_the_options():
    with pytest.raises(SpecdecError, match="has no option alpah"):
        DrafterSpec.from_fields({"name": "oracle", "alpah": 0.5})


def test_a_new_drafter_is_one_registered_class():
    @dataclass(frozen=True)
    class RepeatOptions:
        times: str = "1"

    @register
    class Repeat(Drafter):
        name = "repeat-test"
        Options = RepeatOptions
        arg = "times"

        @classmethod
        def build(cls, options, ctx):
            return cls()

    try:
        spec = DrafterSpec.parse("repeat-test:2")
        assert spec.options == RepeatOptions("2") and str(spec) == "repeat-test:2"
        assert isinstance(spec.build(sm=None), Repeat)
    finally:
        del DRAFTERS["repeat-test"]
