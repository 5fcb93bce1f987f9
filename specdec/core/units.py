"""Parsing and printing of sizes. A cache budget is written `512MiB`, `2GB`, `1000000`, `96slots`
or `25%` (of the model's routed experts); `Budget.parse` reads it once, where it enters (the
command line, Hydra's `cache.budget`, `load`'s keywords), and the typed value travels from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from specdec.core.errors import BudgetError

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_BUDGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")
_PERCENT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")
DEFAULT_BUDGET = "25%"  # of all routed experts: the one default of every entry point
MAX_BUDGET = 1 << 62  # beyond any machine; keeps slot and byte counts inside int64


@dataclass(frozen=True)
class Budget:
    """A cache budget: a byte count, a slot count or a share of the routed experts (exactly one
    is set), and the text it was written as (what messages quote)."""

    nbytes: int | None = None
    slots: int | None = None
    percent: float | None = None  # 0 < p <= 100, of every routed expert of the model
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, value: str | int | Budget) -> Budget:
        """`'25%'` -> Budget(percent=25.0); bytes and slots as parse_budget reads them."""
        if isinstance(value, Budget):
            return value
        text = str(value).strip()
        if text.endswith("%"):
            return cls(percent=parse_percent(text), text=str(value))
        return replace(parse_budget(value if isinstance(value, int) else text), text=str(value))

    def to_slots(self, slot_bytes: int) -> int:
        """Number of whole slots of `slot_bytes` that fit (a byte or slot budget)."""
        if self.percent is not None:
            raise BudgetError(
                f"budget {self}: a share of the experts needs a model; give bytes or slots here"
            )
        if self.slots is not None:
            return self.slots
        return int(self.nbytes // slot_bytes)

    def slots_of(self, slot_bytes: int, n_experts: int) -> int:
        """Slots the budget asks for in a model of `n_experts` routed experts of `slot_bytes`."""
        if self.percent is not None:
            return int(n_experts * self.percent / 100)
        return self.to_slots(slot_bytes)

    def __str__(self) -> str:
        if self.text:
            return self.text
        if self.percent is not None:
            return f"{self.percent:g}%"
        return f"{self.slots}slots" if self.slots is not None else format_bytes(self.nbytes)


def parse_budget(text: str | int) -> Budget:
    """`'2GB'` -> Budget(nbytes=2e9); `'96slots'` -> Budget(slots=96); plain ints are bytes."""
    if isinstance(text, int):
        return Budget(nbytes=_bounded(text, text))
    m = _BUDGET_RE.match(str(text))
    if not m:
        raise BudgetError(
            f"cannot parse budget {text!r}: write bytes with an optional unit "
            "(512MiB, 2GB, 1000000) or a slot count (96slots)"
        )
    number, unit = m.group(1), m.group(2).upper()
    if unit in ("SLOT", "SLOTS"):
        if not number.isdigit():
            raise BudgetError(f"budget {text!r}: a slot count must be a whole number")
        return Budget(slots=_bounded(int(number), text))
    if unit not in _UNITS:
        raise BudgetError(
            f"budget {text!r}: unknown unit {m.group(2)!r}; use one of B KB MB GB KiB MiB GiB or slots"
        )
    return Budget(nbytes=_bounded(int(float(number) * _UNITS[unit]), text))


def parse_percent(text: str) -> float:
    """`'25%'` -> 25.0: a share of all routed experts, 0 < p <= 100 (no inf, NaN or 1e99)."""
    m = _PERCENT_RE.match(str(text))
    if not m:
        raise BudgetError(f"cannot parse budget {text!r}: write a percentage like 25%")
    value = float(m.group(1))
    if not 0 < value <= 100:
        raise BudgetError(f"budget {text!r}: a share of the experts is above 0% and at most 100%")
    return value


def _bounded(value: int, text: str | int) -> int:
    if value >= MAX_BUDGET:
        raise BudgetError(
            f"budget {text!r} is too large to be a cache (at most 2^62 bytes or slots)"
        )
    return value


def format_bytes(n: float) -> str:
    """Human-readable binary size: 1536 -> '1.5KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")
