"""Property: greedy speculative decoding over streamed experts is lossless, whatever the setup.

Run: `pytest tests/decode/test_lossless_property.py`. Hypothesis draws γ (1..8), the drafts (oracle:α
with a random α and seed, so drafts are random tokens or the right ones in random places, or
the random MTP module, or the cache-only self-draft), the budget (top-k slots up to every
expert), the policy (static with a scratch of one position's top-k, so wide steps must chunk),
and router lookahead; the committed tokens must equal mlx-lm's own greedy generation on the
resident model. tests/decode/test_speculative.py covers each drafter at fixed γ and budget; this file
covers the combinations it does not enumerate.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm import load as mlx_load

from specdec.cache.policies import POLICIES
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import first_departure, generate
from specdec.stream.loader import load
from tests.helpers import mlx_lm_greedy, random_checkpoint

N_TOKENS = 24
TOP_K, N_BLOCKS = 4, 48  # the random deepseek_v3: top-4 of 16 experts, 2 MoE layers + MTP


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("lossless")
    os.environ.setdefault("SPECDEC_CACHE", str(root / "cache"))
    src = random_checkpoint(root, "deepseek_v3", 4)
    model, tok = mlx_load(str(src))
    prompt = tok.encode("for i in range(10):\n    print(")
    ref = mlx_lm_greedy(model, prompt, N_TOKENS)
    return src, prompt, ref


drafters = st.one_of(
    st.builds(lambda a: f"oracle:{a:.3f}", st.floats(0, 1)),
    st.sampled_from(["mtp", "self"]),
)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gamma=st.integers(1, 8),
    drafter=drafters,
    seed=st.integers(0, 2**16),
    slots=st.integers(TOP_K, N_BLOCKS),
    policy=st.sampled_from(POLICIES),
    lookahead=st.integers(0, 1),
)
def test_speculation_is_lossless(reference, gamma, drafter, seed, slots, policy, lookahead):
    src, prompt, ref = reference
    sm = load(
        src,
        budget=f"{slots}slots",
        policy=policy,
        io="buffered",
        lookahead=lookahead,
        policy_options={"scratch": TOP_K},  # static: steps wider than one position chunk
    )
    try:
        cfg = DecodeConfig(gamma=gamma, max_tokens=N_TOKENS, seed=seed)
        res = generate(sm, prompt, drafter, cfg, stop_at_eos=False)
    finally:
        sm.close()
    assert res.tokens == ref, f"{drafter} γ={gamma} {slots} slots {policy}: diverged"
    s = res.summary
    assert s["committed"] == N_TOKENS - 1  # the prefill commits the first token
    assert s["hits"] + s["misses"] == sum(r.accesses for r in res.records)


def test_first_departure_names_where_two_runs_part():
    assert first_departure([1, 2, 3], [1, 2, 3]) is None
    assert first_departure([1, 5, 3], [1, 2, 3]) == 1
    assert first_departure([1, 2], [1, 2, 3]) == 2  # one a prefix of the other: not equal
