"""Speculative decoding over streamed experts is lossless, and its records add up.

Greedy: for every drafter and γ in {2, 3, 4, 8, auto}, the speculative output equals plain greedy
output and mlx-lm's own greedy generation, token for token, over 128 tokens, with a budget small
enough to miss. Sampling: the rejection rule preserves the target distribution (chi-square tests,
p > 0.01), on synthetic distributions and end to end.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_load
from scipy.stats import chi2_contingency, chisquare

from specdec.core.errors import SpecdecError
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.decode.sampling import judge
from specdec.stream.loader import load
from specdec.stream.steplog import Call
from tests.helpers import (
    PLAIN_BETWEEN,
    fast_cases,
    force_gamma_schedule,
    mlx_lm_greedy,
    random_checkpoint,
)

N_TOKENS = 128


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    import os

    os.environ["SPECDEC_CACHE"] = str(root / "cache")
    src = random_checkpoint(root, "deepseek_v3", 4)
    draft_src = random_checkpoint(root, "qwen3_moe", 4)
    ref_model, ref_tok = mlx_load(str(src))
    prompt = ref_tok.encode("import os\nimport sys\n\ndef main(argv):\n    ")
    ref = mlx_lm_greedy(ref_model, prompt, N_TOKENS)
    sm = load(src, budget="30%", io="direct")
    assert sm.mtp is not None, "random deepseek_v3 checkpoints carry a random MTP layer"
    yield sm, prompt, ref, draft_src
    sm.close()


@pytest.fixture(scope="module")
def target_full(target):
    """The same checkpoint with every expert read at load (warm): where auto drafts on this
    model (16 experts a layer: at any budget that misses, a pass of 2 already spans more than
    half the cache, and cold, MTP's first drafts read experts plain decoding never reads, so
    auto keeps to plain decoding there: its guard allows no more bytes than plain's, see
    specdec/gamma/chooser.py)."""
    _, prompt, ref, draft_src = target
    sm = load(draft_src.parent / "deepseek_v3-4", budget="100%", io="direct", warm=True)
    yield sm, prompt, ref, draft_src
    sm.close()


def _run(sm, prompt, drafter, gamma, **kw):
    sm.reset_cache()
    cfg = DecodeConfig(gamma=gamma, max_tokens=kw.pop("max_tokens", N_TOKENS), **kw)
    return generate(sm, prompt, drafter, cfg, stop_at_eos=False)


# the fast loop runs mtp at γ 2; the full suite every drafter at every γ
@pytest.mark.parametrize("gamma", fast_cases([2, 3, 4, 8, "auto"]))
@pytest.mark.parametrize("drafter", fast_cases(["mtp", "self", "lookup", "oracle:0.7", "draft"]))
def test_greedy_speculation_is_lossless(request, drafter, gamma):
    auto = gamma == "auto"
    sm, prompt, ref, draft_src = request.getfixturevalue("target_full" if auto else "target")
    spec = f"draft:{draft_src}" if drafter == "draft" else drafter
    res = _run(sm, prompt, spec, gamma)
    assert res.tokens == ref, f"{drafter} γ={gamma} diverged from plain greedy"
    assert auto or res.summary["misses"] > 0, "the budget must force reads"
    assert res.summary["drafted"] > 0, "the run must draft (auto: at least while exploring)"
    slot = sm.streamer.index.slot_bytes
    for r in res.records:
        assert r.verify_bytes_read == sum(r.misses.values()) * slot
        assert r.committed == r.accepted + 1 or r is res.records[-1]
    if drafter == "self":
        assert res.summary["draft_bytes_read"] == 0, "self-drafts must never read from disk"


def test_plain_decoding_is_the_gamma_1_case(target):
    sm, prompt, ref, _ = target
    res = _run(sm, prompt, "none", 1)
    assert res.tokens == ref
    assert all(r.drafted == 0 and r.committed == 1 for r in res.records)
    assert res.summary["mean_union"] == sm.top_k


@pytest.mark.parametrize("gamma", [4, "auto"])
def test_a_gamma_with_nothing_to_draft_is_plain_decoding_and_says_so(target, gamma):
    """No drafter: every pass verifies one position whatever γ is asked (a sweep's drafter=none
    beside γ = 4), and its records say γ = 1, not 4 (they did, 0 drafts in each)."""
    sm, prompt, ref, _ = target
    res = _run(sm, prompt, "none", gamma, max_tokens=16)
    assert res.tokens == ref[:16]
    assert {r.gamma for r in res.records} == {1} and res.summary["gamma"] == 1


@pytest.mark.slow
def test_oracle_measures_the_acceptance_it_was_given(target):
    sm, prompt, _, _ = target
    res = _run(sm, prompt, "oracle:0.7", 8, max_tokens=600)
    alpha = res.summary["acceptance"]
    assert abs(alpha - 0.7) <= 0.05, alpha
    # the union of a verify pass grows with γ: rejected drafts route elsewhere
    assert res.summary["mean_union"] > sm.top_k


@pytest.mark.slow
def test_rejection_rule_preserves_target_distribution():
    """First committed token of a pass ~ p, for a draft q far from p (synthetic, exact check)."""
    rng = np.random.default_rng(0)
    V, n = 6, 20000
    p_logits = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.07, 0.03]))
    q = np.array([0.05, 0.05, 0.1, 0.2, 0.3, 0.3])
    counts = np.zeros(V)
    for _ in range(n):
        d = int(rng.choice(V, p=q))
        v = judge([d], q[None], np.stack([p_logits, p_logits]), 1.0, rng)
        counts[v.tokens[0]] += 1
    assert chisquare(counts, np.exp(p_logits) * n).pvalue > 0.01


@pytest.mark.slow
def test_speculative_sampling_matches_plain_sampling_end_to_end(target):
    """Token 2 (the first from a verify pass) has the same distribution with and without drafts."""
    sm, prompt, _, _ = target
    plain, spec = [], []
    for seed in range(150):
        plain.append(_run(sm, prompt, "none", 1, max_tokens=2, temp=1.0, seed=seed).tokens[1])
        spec.append(
            _run(sm, prompt, "self", 3, max_tokens=2, temp=1.0, seed=10_000 + seed).tokens[1]
        )
    vocab = sorted(set(plain) | set(spec))
    table = np.array([[plain.count(t) for t in vocab], [spec.count(t) for t in vocab]])
    common = table.sum(0) >= 5
    table = np.concatenate([table[:, common], table[:, ~common].sum(1, keepdims=True)], axis=1)
    assert chi2_contingency(table).pvalue > 0.01


def test_gamma_below_one_is_a_clear_error(target):
    sm, prompt, _, _ = target
    with pytest.raises(SpecdecError, match="gamma must be >= 1"):
        _run(sm, prompt, "none", 0)


def test_mtp_without_weights_is_a_clear_error(target):
    _, prompt, _, draft_src = target
    other = load(draft_src, budget="30%", io="buffered")  # qwen3_moe: no MTP module
    try:
        with pytest.raises(SpecdecError, match="no MTP weights"):
            _run(other, prompt, "mtp", 2)
    finally:
        other.close()


def test_mtp_drafts_equal_a_full_recomputation(target):
    """The MTP drafter's incremental state (catch-up, chaining, trims) matches a fresh pass."""
    sm, prompt, _, _ = target
    proposed = []
    from specdec.decode.drafters.mtp import MTPDrafter

    original = MTPDrafter.propose

    def spy(self, st, n):
        out = original(self, st, n)
        if out[0]:  # the last pass may draft nothing (no tokens left)
            proposed.append((len(st.tokens), out[0][0]))
        return out

    MTPDrafter.propose = spy
    try:
        res = _run(sm, prompt, "mtp", 3, max_tokens=40)
    finally:
        MTPDrafter.propose = original
    tokens = prompt + res.tokens
    model = sm.model
    with sm.streamer.serving(Call("check")):
        hidden = model.model(mx.array([tokens]))  # [1, T, H], fresh cache
        logits, _ = sm.mtp(
            hidden[:, :-1],
            mx.array([tokens[1:]]),
            embed=model.model.embed_tokens,
            head=model.lm_head,
        )
    full = np.array(logits[0].argmax(-1))  # full[i] predicts tokens[i + 2]
    for length, draft in proposed:  # st.tokens had `length` tokens; the draft is token `length`
        assert draft == int(full[length - 2])


@pytest.mark.parametrize("drafter", ["mtp", "self", "lookup", "oracle:0.9"])
def test_last_pass_never_drafts_past_the_tokens_left(target, drafter):
    """--max-tokens 3 --gamma 20: each pass drafts at most the tokens left minus one, so accepted
    and committed agree and nothing is read for positions that cannot be kept."""
    sm, prompt, ref, _ = target
    res = _run(sm, prompt, drafter, 20, max_tokens=3)
    assert res.tokens == ref[:3]
    left = 3 - 1  # the prefill commits the first token
    for r in res.records:
        assert r.drafted <= left - 1 and r.committed == r.accepted + 1, r
        left -= r.committed
    assert left == 0 and res.summary["committed"] == 2
    assert res.summary["drafted"] == 1  # one on the first pass (2 left), none after


def test_records_file_is_not_appended_to_unless_asked(target, tmp_path):
    sm, prompt, _, _ = target
    path = tmp_path / "r.jsonl"
    cfg = DecodeConfig(gamma=2, max_tokens=4)
    first = generate(sm, prompt, "self", cfg, records_path=path, stop_at_eos=False)
    with pytest.raises(SpecdecError, match="exists .* pass --append"):
        generate(sm, prompt, "self", cfg, records_path=path, stop_at_eos=False)
    assert len(path.read_text().splitlines()) == len(first.records)
    second = generate(sm, prompt, "self", cfg, records_path=path, stop_at_eos=False, append=True)
    assert len(path.read_text().splitlines()) == len(first.records) + len(second.records)


@pytest.mark.parametrize("max_tokens", [1, 2, 4])
def test_trace_union_at_small_max_tokens(target, max_tokens):
    """γ longer than the decoded positions (max_tokens - 1) is left out, not averaged as NaN."""
    from specdec.decode.trace_union import consecutive_overlap, trace_union

    sm, prompt, _, _ = target
    sm.reset_cache()
    out = trace_union(sm, prompt, max_tokens, [1, 2, 3, 8])
    assert sorted(out) == [g for g in (1, 2, 3, 8) if g <= max_tokens - 1]
    assert all(np.isfinite(t["mean"]) and t["windows"] >= 1 for t in out.values())
    rho = consecutive_overlap(sm, prompt, max_tokens)
    assert (rho is None) == (max_tokens < 3)


@pytest.mark.parametrize("gammas", [None, PLAIN_BETWEEN], ids=["fixed 3", "auto"])
def test_draft_model_drafts_equal_a_full_recomputation(target, gammas, monkeypatch):
    """The draft model's KV cache follows every committed token, also across passes that draft
    nothing (`--gamma auto` made to run plain passes between drafting ones): each first draft
    is its greedy token after the whole committed prefix."""
    import mlx.core as mx

    from specdec.decode.drafters.draft_model import DraftModelDrafter

    sm, prompt, ref, draft_src = target
    proposed, original, model = [], DraftModelDrafter.propose, []

    def spy(self, st, n):
        out = original(self, st, n)
        model[:] = [self.model]
        if out[0]:
            proposed.append((len(st.tokens), out[0][0]))
        return out

    monkeypatch.setattr(DraftModelDrafter, "propose", spy)
    if gammas is not None:
        force_gamma_schedule(monkeypatch, gammas)
    res = _run(sm, prompt, f"draft:{draft_src}", 3 if gammas is None else "auto", max_tokens=24)
    assert res.tokens == ref[:24] and proposed
    tokens = prompt + res.tokens
    full = np.array(model[0](mx.array([tokens]))[0].argmax(-1))  # full[i] predicts tokens[i + 1]
    for length, draft in proposed:
        assert draft == int(full[length - 1]), length
