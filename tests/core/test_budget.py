"""The one budget parser: `Budget.parse` reads bytes, slots and shares once, at the edge.

pytest tests/core/test_budget.py
"""

from __future__ import annotations

import pytest

from specdec.core.errors import BudgetError
from specdec.core.units import DEFAULT_BUDGET, Budget
from specdec.stream.config import StreamConfig


@pytest.mark.parametrize(
    "text, nbytes, slots, percent",
    [
        ("512MiB", 512 << 20, None, None),
        ("2GB", 2 * 10**9, None, None),
        ("1000000", 10**6, None, None),
        (4096, 4096, None, None),
        ("96slots", None, 96, None),
        (" 25% ", None, None, 25.0),
        ("100%", None, None, 100.0),
        ("0.5%", None, None, 0.5),
    ],
)
def test_each_form_parses_to_one_field_and_keeps_its_text(text, nbytes, slots, percent):
    b = Budget.parse(text)
    assert (b.nbytes, b.slots, b.percent) == (nbytes, slots, percent)
    assert str(b) == str(text)  # messages quote the budget as the user wrote it
    assert Budget.parse(b) is b  # a parsed budget passes through


def test_slots_of_counts_bytes_slots_and_shares():
    assert Budget.parse("25%").slots_of(slot_bytes=1000, n_experts=160) == 40
    assert Budget.parse("10%").slots_of(slot_bytes=1000, n_experts=15) == 1  # rounds down
    assert Budget.parse("3500B").slots_of(slot_bytes=1000, n_experts=160) == 3
    assert Budget.parse("7slots").slots_of(slot_bytes=1000, n_experts=160) == 7
    with pytest.raises(BudgetError, match="a share of the experts needs a model"):
        Budget.parse("25%").to_slots(1000)


@pytest.mark.parametrize(
    "text, message",
    [  # the messages docs/errors.md lists, unchanged by the typed value
        ("12parsecs", "budget '12parsecs': unknown unit 'parsecs'; use one of B KB MB"),
        ("1e99%", "cannot parse budget '1e99%': write a percentage like 25%"),
        ("inf%", "cannot parse budget 'inf%': write a percentage like 25%"),
        ("0%", "budget '0%': a share of the experts is above 0% and at most 100%"),
        ("2.5slots", "budget '2.5slots': a slot count must be a whole number"),
        ("99999999999999999999999slots", "is too large to be a cache"),
        ("lots", "cannot parse budget 'lots': write bytes with an optional unit"),
    ],
)
def test_bad_budgets_are_one_line_errors(text, message):
    with pytest.raises(BudgetError, match=message.replace("(", r"\(")) as e:
        Budget.parse(text)
    assert "\n" not in str(e.value)


def test_stream_config_holds_a_parsed_budget():
    """The default and a library caller's text both arrive typed; equal budgets compare equal."""
    assert StreamConfig().budget == Budget.parse(DEFAULT_BUDGET)
    assert StreamConfig(budget="10%").budget == Budget(percent=10.0)
    with pytest.raises(BudgetError):
        StreamConfig(budget="12parsecs")
