"""`none`: plain decoding through the same loop (nothing drafted, one position per pass)."""

from __future__ import annotations

from specdec.decode.drafters.registry import Drafter, register

register(Drafter)
