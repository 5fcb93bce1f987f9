"""γ as a setting: positions per verify pass, a fixed number or `auto`, parsed once at the edge.

    gamma = Gamma.parse("auto")      # --gamma, Hydra's gamma=; an int passes through Gamma.parse
    gamma.auto, gamma.fixed          # True, None   |   Gamma.parse(4): False, 4
    str(gamma), gamma.label          # "auto" / "4";  "auto" / 4, as records and results write it

γ = 1 is plain decoding; `auto` chooses γ before each pass (specdec.gamma.chooser).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.core.errors import SpecdecError

AUTO_TEXT = "auto"
# The widest fixed γ. A pass commits E = (1 - α^γ)/(1 - α) tokens on average, at most
# 1/(1 - α): at α = 0.99 γ = 1024 reaches 99.997% of it, so no wider pass can pay; and a pass
# allocates arrays of γ positions (--gamma 1e10 asked simulate for a 74.5 GiB one).
MAX_FIXED_GAMMA = 1024


@dataclass(frozen=True)
class Gamma:
    fixed: int | None = 1  # None: auto

    @classmethod
    def parse(cls, value: str | int | Gamma) -> Gamma:
        """A positive integer or `auto` (any case), from the command line or a config."""
        if isinstance(value, Gamma):
            return value
        text = str(value).strip()
        if text.lower() == AUTO_TEXT:
            return cls(None)
        try:
            g = int(text)
        except ValueError:
            raise SpecdecError(
                f"gamma {value!r}: give a whole number >= 1 (1 is plain decoding) or auto"
            ) from None
        if g < 1:
            raise SpecdecError(f"gamma must be >= 1 (got {g}); gamma = 1 is plain decoding")
        if g > MAX_FIXED_GAMMA:
            raise SpecdecError(
                f"gamma must be at most {MAX_FIXED_GAMMA} (got {g}): a pass of more positions adds no "
                "tokens any drafter's acceptance can earn"
            )
        return cls(g)

    @property
    def auto(self) -> bool:
        return self.fixed is None

    @property
    def label(self) -> int | str:
        """What records and results write: the number, or "auto"."""
        return AUTO_TEXT if self.fixed is None else self.fixed

    def __str__(self) -> str:
        return str(self.label)


AUTO = Gamma(None)
