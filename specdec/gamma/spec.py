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
