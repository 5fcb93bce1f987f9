"""What a drafter sees of the decode: the model, the main KV cache and the committed tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from specdec.model.loader import StreamedModel


@dataclass
class DecodeState:
    sm: StreamedModel
    cache: list  # mlx-lm prompt cache of the main model
    tokens: list[int]  # prompt + committed; the last one (y) is committed but not yet fed
    n_prompt: int
    temp: float
    rng: np.random.Generator
    hidden: mx.array | None = None  # [1, T, H] final hidden of the last main forward
    generated: list[int] = field(default_factory=list)  # committed tokens after the prompt

    @property
    def vocab_size(self) -> int:
        return int(self.sm.model.args.vocab_size) if hasattr(self.sm.model, "args") else 0

    def pick(self, logits: np.ndarray) -> tuple[int, np.ndarray | None]:
        """A draft token from logits [V]: argmax at temp 0, else a sample with its q."""
        from specdec.decode.sampling import probs, sample

        if self.temp == 0:
            return int(logits.argmax()), None
        q = probs(logits, self.temp)
        return sample(q, self.rng), q
