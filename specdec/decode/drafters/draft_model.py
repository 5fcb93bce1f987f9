"""`draft:PATH`: a small resident mlx-lm model with the target's tokenizer drafts."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from specdec.core.errors import SpecdecError
from specdec.decode.drafters.registry import DraftContext, Drafter, register, stack_q
from specdec.decode.sampling import Verdict
from specdec.decode.state import DecodeState


@dataclass(frozen=True)
class DraftOptions:
    path: str | None = None  # the draft model's mlx-lm directory (or bundled / hub name)

    def __post_init__(self):
        if not self.path:
            raise SpecdecError(
                "drafter 'draft:' needs a model: write draft:PATH (an mlx-lm model dir)"
            )


@register
class DraftModelDrafter(Drafter):
    """A small resident mlx-lm model with the same vocabulary, kept in step with its own cache."""

    name = "draft"
    listed = 5  # place in help texts
    Options = DraftOptions
    arg = "path"
    usage = "draft:PATH"
    draft_compute = "model"

    def __init__(self, model, vocab_size: int):
        self.model = model
        if model.args.vocab_size != vocab_size:
            raise SpecdecError(
                f"draft model vocabulary {model.args.vocab_size} != target's {vocab_size}: "
                "a draft model must share the target's tokenizer"
            )
        from mlx_lm.models.cache import (
            make_prompt_cache,
        )  # here: mlx-lm takes seconds to import (--help)

        self.cache = make_prompt_cache(model)
        self.pending: list[int] = []
        self.fed_drafts = 0

    @classmethod
    def build(cls, options: DraftOptions, ctx: DraftContext) -> DraftModelDrafter:
        return cls(_load_draft_model(options.path), int(ctx.sm.model.args.vocab_size))

    def model_config(self) -> dict:
        """The draft model's config, for the clock's shape of its forwards."""
        args = dict(vars(self.model.args))
        # mlx-lm's ModelArgs drop config.json's quantization: take it from a quantized layer
        for _, m in self.model.named_modules():
            if hasattr(m, "bits") and hasattr(m, "group_size"):
                args["quantization"] = {"bits": m.bits, "group_size": m.group_size}
                break
        return args

    def _logits(self, tokens: list[int]) -> np.ndarray:
        return np.array(self.model(mx.array([tokens]), cache=self.cache)[0, -1].astype(mx.float32))

    def start(self, st: DecodeState) -> None:
        self._logits(st.tokens[:-1])
        self.pending = [st.tokens[-1]]

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        drafts, qs = [], []
        if n:  # a pass that drafts nothing feeds nothing: its tokens wait for the next that does
            logits, self.pending = self._logits(self.pending), []
            for j in range(n):
                tok, q = st.pick(logits)
                drafts.append(tok)
                qs.append(q)
                if j < n - 1:
                    logits = self._logits([tok])
        self.fed_drafts = max(n - 1, 0)
        return drafts, stack_q(qs)

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        kept = min(verdict.accepted, self.fed_drafts)
        if self.fed_drafts > kept:
            from mlx_lm.models.cache import trim_prompt_cache

            trim_prompt_cache(self.cache, self.fed_drafts - kept)
        self.pending += drafts[kept : verdict.accepted] + [verdict.tokens[-1]]


def _load_draft_model(path: str):
    """The draft model of `draft:PATH`, loaded whole by mlx-lm (it must fit in memory)."""
    from mlx_lm.utils import load as mlx_load

    from specdec.stream.loader import resolve

    model_dir = resolve(path)
    if (model_dir / "experts.json").exists():
        raise SpecdecError(
            f"drafter draft:{path}: {model_dir} is a packed directory (its experts are not in "
            "model.safetensors); a draft model is loaded whole: give its mlx-lm model directory"
        )
    try:
        model, _ = mlx_load(str(model_dir))
    except (OSError, ValueError) as e:
        raise SpecdecError(
            f"drafter draft:{path}: mlx-lm cannot load {model_dir} ({str(e).splitlines()[0]}); "
            "give an mlx-lm model directory"
        ) from None
    return model
