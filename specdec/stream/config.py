"""How a model's routed experts stream: one typed value from the command line or Hydra to the loader.

    stream = StreamConfig(Budget.parse("10%"), PolicySpec.parse("static"), policy_options=...)
    sm = load("tiny", stream, with_mtp=False)

`specdec generate` and `specdec-exp` build it in one place from their text (specdec.cli.settings
`stream_config`: the `--budget/--policy/...` options, or Hydra's `cache` and `model` groups);
library callers may pass the same fields as keywords to `load`, which makes one StreamConfig of
them (a budget or policy given there as text is parsed once, here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec.cache.spec import PolicySpec
from specdec.core.errors import SpecdecError
from specdec.core.units import DEFAULT_BUDGET, Budget
from specdec.store.reader import check_threads


@dataclass(frozen=True)
class StreamConfig:
    budget: Budget = Budget.parse(DEFAULT_BUDGET)  # bytes, slots or a share of the experts
    policy: PolicySpec = PolicySpec()  # a registered cache policy with its +options
    # the policy's options (its Options dataclass); a `hotlist` is (layer, expert) pairs, hottest
    # first
    policy_options: dict = field(default_factory=dict)
    # direct | buffered | mmap | pinned (CUDA); None: the backend's (specdec.store.reader.default_io)
    io: str | None = None
    threads: int = 8  # reader threads
    verify_checksums: bool = False  # crc32 every block read
    lookahead: int = 0  # d > 0: each MoE layer starts the reads the router d layers on wants
    warm: bool = False  # read every routed expert at load (the budget must hold them all)

    def __post_init__(self):
        if not isinstance(self.budget, Budget):  # load("tiny", budget="10%"): text from a caller
            object.__setattr__(self, "budget", Budget.parse(self.budget))
        object.__setattr__(self, "policy", PolicySpec.parse(self.policy))
        check_threads(self.threads)  # before the model loads, not when the reader starts
        if self.lookahead < 0:
            raise SpecdecError(f"lookahead must be >= 0 (got {self.lookahead}); 0 turns it off")
