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


@pytest.mark.parametrize("budget,warm", [("100%", True), ("25%", False)])
def test_plain_decode_forwards_are_fed_nothing_the_prefill_was_not(budget, warm, monkeypatch):
    """Every kind of token input (dtype, positions) a plain greedy decode forward is fed was
    fed to a forward inside the prefill, as mlx-lm's generate_step feeds it, so no decode token
    pays the first use of its kernels (on CUDA a fresh process compiles or loads each: the
    first decode token took 15-17 ms against mlx-lm's ~1 ms where token 2's forward was fed
    the host's int32 pick and every later one the device's uint32 argmax, docs/results/cuda.md).
    Full budget pipelines tokens on the device picks; 25% feeds each from the host."""
    sm = load("tiny", budget=budget, warm=warm, io="buffered")
    seen, phase = [], ["prefill"]
    model_call = type(sm.model).__call__

    def spy(self, inputs, *args, **kwargs):
        seen.append((phase[0], inputs.dtype, inputs.shape[-1]))
        return model_call(self, inputs, *args, **kwargs)

    def decoding(self, started):
        phase[0] = "decode"
        yield from greedy_passes(self, started)

    greedy_passes = loop.Decode._greedy_passes
    monkeypatch.setattr(type(sm.model), "__call__", spy)
    monkeypatch.setattr(loop.Decode, "_greedy_passes", decoding)
    try:
        generate(sm, sm.encode("def walk(root):"), "none", DecodeConfig(1, 24), stop_at_eos=False)
    finally:
        sm.close()
    fed = {p: {(dtype, n) for q, dtype, n in seen if q == p} for p in ("prefill", "decode")}
    assert fed["decode"], "decode forwards ran after the prefill"
    assert fed["decode"] <= fed["prefill"], f"first fed in a decode token: {fed}"
