"""Budget resolution: how many arena slots a cache budget buys, checked against memory.

    plan = plan_slots(Budget.parse("9GB"), index, top_k=8, resident_bytes=2_400_000_000)
    plan.n_slots, plan.holds_all, plan.arena_bytes

A budget is bytes (`9GB`), slots (`96slots`) or a share of the routed experts (`25%`), parsed
once where it enters (`specdec.core.units.Budget.parse`). A budget above the model's routed experts
holds all of them: the plan is capped at one slot per expert (`holds_all`, and `requested_slots`
says what was asked), so nothing is allocated beyond the model. A budget whose arena plus the
resident weights does not fit the memory available now (Linux: MemAvailable) is a BudgetError
before anything is allocated. Run `pytest tests/store/test_scale.py` for the checks.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass

from specdec.core.errors import BudgetError
from specdec.core.machine import physical_memory
from specdec.core.units import Budget, format_bytes
from specdec.store.arena import arena_bytes
from specdec.store.layout import ExpertIndex


@dataclass(frozen=True)
class SlotPlan:
    budget: str  # as given
    requested_slots: int  # what the budget asked for, before the cap
    n_slots: int  # slots the arena gets
    n_experts: int  # routed experts of the model (every packed layer, MTP included)
    slot_bytes: int
    arena_bytes: int  # memory the arena allocates (one ALIGN of row padding per slot)

    @property
    def holds_all(self) -> bool:
        """The cache holds every routed expert: nothing is read twice."""
        return self.n_slots == self.n_experts

    def stats(self) -> dict:
        return {
            "cache_slots": self.n_slots,
            "cache_bytes": self.n_slots * self.slot_bytes,
            "arena_bytes": self.arena_bytes,
            "requested_slots": self.requested_slots,
            "holds_all_experts": self.holds_all,
        }


def meminfo(field: str) -> int | None:
    """The number of one /proc/meminfo line (`MemAvailable` in KiB, `HugePages_Free` a count),
    or None where there is no such file or line (macOS)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def available_memory() -> int | None:
    """Bytes the kernel says a new allocation can take without swapping (None if unknown)."""
    kib = meminfo("MemAvailable")
    if kib is not None:
        return kib * 1024
    if sys.platform == "darwin":  # unified memory: all of it
        return physical_memory() or None
    return None


# Linux: the calling thread's usage, whose ru_maxrss is still the process's high-water mark (a
# property of the address space, which every thread shares); RUSAGE_SELF also sums every
# thread's CPU time, waiting on the CPUs where MLX's and the reader's threads run: in a decode
# loop on this 2-core VM 2.9 µs median but up to 1.1 ms, against 1.9 µs and at most 13 µs.
# Elsewhere (macOS has no RUSAGE_THREAD) the process's.
_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (getrusage: KiB on Linux, bytes on macOS);
    read once per decode pass."""
    peak = resource.getrusage(_RUSAGE_WHO).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def plan_slots(
    budget: Budget,
    index: ExpertIndex,
    top_k: int,
    resident_bytes: int = 0,
    layers: list[int] | None = None,
    available: int | None = None,
) -> SlotPlan:
    """Slots for `budget`: at least top_k, at most every expert of `layers`, within memory.

    `N%` is a share of every packed expert; layers: the MoE layers streamed (default: all
    packed); available: bytes free for the arena and the resident weights (default: now's).
    """
    want = budget.slots_of(index.slot_bytes, index.n_blocks)
    n_experts = sum(index.layers[lid].n_experts for lid in layers or index.layer_ids)
    n = min(want, n_experts)
    if n < top_k:
        raise BudgetError(
            f"budget {budget} holds {n} expert slots of {format_bytes(index.slot_bytes)}, "
            f"but one position selects top-k = {top_k}: use at least {top_k * index.slot_bytes} "
            f"bytes ({top_k}slots)"
        )
    need = arena_bytes(n, index.slot_bytes)
    available = available_memory() if available is None else available
    if available is not None and need + resident_bytes > available:
        fits = max(0, (available - resident_bytes) // arena_bytes(1, index.slot_bytes))
        raise BudgetError(
            f"budget {budget} needs {format_bytes(need)} of expert cache plus "
            f"{format_bytes(resident_bytes)} of resident weights, but only "
            f"{format_bytes(available)} of memory is available: lower the budget to at most "
            f"{fits}slots ({format_bytes(fits * index.slot_bytes)})"
        )
    return SlotPlan(str(budget), want, n, n_experts, index.slot_bytes, need)
