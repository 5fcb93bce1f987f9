"""The prefill feeds the prompt as mlx-lm's `generate_step` does (chunks of PREFILL_STEP, then
the last token alone) and evaluates what mlx-lm's evaluates between chunks: the KV cache, not
the LM head over the prompt's head positions (specdec/decode/loop.py `prefill_head`, state.py
`feed`). Greedy tokens after a prompt of several chunks equal mlx-lm's, the token after the
prompt picked as a decode step picks (plain decoding) and as a verify pass judges (speculative).

Run: `pytest tests/decode/test_prefill.py`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache

from specdec.checkpoint.bundled import resolve_model
from specdec.decode import loop
from specdec.decode.loop import DecodeConfig, prefill_head
from specdec.decode.run import generate
from specdec.decode.state import DecodeState
from specdec.stream.loader import load
from tests.helpers import mlx_lm_greedy

STEP = 16  # a prefill chunk, small so that a 50-token prompt takes three and the last token


@pytest.fixture(scope="module")
def tiny():
    sm = load("tiny", budget="10%", io="buffered")
    yield sm
    sm.close()


def _prompt(sm) -> list[int]:
    ids = sm.encode("import os\nimport sys\n\ndef walk(root):\n    for name in os.listdir(root):")
    return (ids * 4)[:50]


def test_prefill_evaluates_the_cache_not_the_head(tiny, monkeypatch):
    monkeypatch.setattr(loop, "PREFILL_STEP", STEP)
    shapes, real = [], mx.eval

    def spy(*args):
        shapes.extend(v.shape for _, v in tree_flatten(list(args)) if isinstance(v, mx.array))
        return real(*args)

    prompt = _prompt(tiny)
    tiny.reset_cache()
    st = DecodeState(tiny, make_prompt_cache(tiny.model), list(prompt), len(prompt), 0.0,
                     np.random.default_rng(0))  # fmt: skip
    monkeypatch.setattr(mx, "eval", spy)
    prefill_head(st, want_hidden=False)
    monkeypatch.setattr(mx, "eval", real)
    vocab = tiny.model.args.vocab_size
    assert shapes, "the head's chunks are evaluated (the cache), not left lazy"
    assert all(s[-1] != vocab for s in shapes), f"logits [.., {vocab}] evaluated: {shapes}"
    # three chunks of STEP and the head's last one: all but the prompt's last token
    assert all(c.offset == len(prompt) - 1 for c in st.cache if hasattr(c, "offset"))


def test_greedy_after_a_prompt_of_several_chunks_equals_mlx_lm(tiny, monkeypatch):
    monkeypatch.setattr(loop, "PREFILL_STEP", STEP)
    prompt = _prompt(tiny)
    tiny.reset_cache()
    ours = generate(tiny, prompt, "none", DecodeConfig(1, 24), stop_at_eos=False).tokens
    tiny.reset_cache()
    drafted = generate(tiny, prompt, "lookup", DecodeConfig(3, 24), stop_at_eos=False).tokens
    model, _ = mlx_load(str(resolve_model("tiny")))
    ref = mlx_lm_greedy(model, prompt, 24, prefill_step_size=STEP)
    assert ours == ref and drafted == ref
