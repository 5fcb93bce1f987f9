"""Drafters: each proposes γ−1 tokens per pass (with their distributions when sampling).

    mtp          DeepSeek-V3 MTP module, chained for γ−1 > 1 (its experts stream through the cache)
    self         the target restricted to resident experts, gates renormalised; reads nothing
    draft:PATH   a small resident mlx-lm model with the same tokenizer
    lookup       prompt / n-gram lookup, no model
    oracle:α     the target's own greedy continuation with probability α, another token otherwise
    none         γ = 1, plain decoding

Interface: `start(st)` after the prefill, `propose(st, n) -> (tokens, q or None)`, and
`commit(st, drafts, verdict)` after each verify pass so the drafter can roll its own state back.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from specdec.decode.sampling import Verdict
from specdec.decode.state import DecodeState
from specdec.errors import SpecdecError


class Drafter:
    name = "none"
    needs_hidden = False  # True: the loop keeps the main model's final hidden states

    def start(self, st: DecodeState) -> None:
        pass

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        return [], None

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        pass


def _stack_q(qs: list[np.ndarray | None]) -> np.ndarray | None:
    return None if not qs or qs[0] is None else np.stack(qs)  # [n, V]


class MTPDrafter(Drafter):
    """DeepSeek-V3 MTP: position i's hidden state and token i+1 predict token i+2.

    After each pass the module first catches up on the newly committed positions (hidden states
    of the verify pass, rows 0..accepted), which gives the first draft; further drafts chain the
    module on its own output hidden state, as DeepSeek-V3 inference reuses its one module. Those
    chained positions are trimmed from its KV cache before the next catch-up. All of its expert
    reads land in the draft phase.
    """

    name = "mtp"
    needs_hidden = True

    def __init__(self, mtp, model):
        self.mtp = mtp
        self.embed, self.head = model.model.embed_tokens, model.lm_head  # shared, as in DeepSeek-V3
        self.cache = None
        self.pending: tuple[mx.array, list[int]] | None = None  # (hidden [1,T,H], next tokens)
        self.chained = 0

    def start(self, st: DecodeState) -> None:
        self.cache = self.mtp.make_cache()
        self.pending = (st.hidden, st.tokens[1:])  # prompt positions 0..P-1 -> tokens 1..P

    def _run(self, hidden: mx.array, tokens: list[int]) -> tuple[np.ndarray, mx.array]:
        logits, h = self.mtp(
            hidden, mx.array([tokens]), cache=self.cache, embed=self.embed, head=self.head
        )
        return np.array(logits[0, -1].astype(mx.float32)), h[:, -1:]

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        if n == 0:
            self.chained = 0
            return [], None
        hidden, toks = self.pending
        logits, h = self._run(hidden, toks)
        drafts, qs = [], []
        for j in range(n):
            tok, q = st.pick(logits)
            drafts.append(tok)
            qs.append(q)
            if j < n - 1:
                logits, h = self._run(h, [tok])
        self.chained = n - 1
        return drafts, _stack_q(qs)

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        if self.chained:
            self.cache.trim(self.chained)  # one KVCache: the module has one attention layer
        n = verdict.accepted
        self.pending = (st.hidden[:, : n + 1], verdict.tokens)  # rows y, d1..dn -> d1..dn, t


class SelfDrafter(Drafter):
    """Cache-only self-draft: the target with each MoE layer limited to resident experts."""

    name = "self"

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        from specdec.decode.loop import forward

        drafts, qs, tok = [], [], st.tokens[-1]
        with st.sm.streamer.phase_of("draft", resident_only=True):
            for _ in range(n):
                tok, q = st.pick(forward(st, [tok], False)[-1])
                drafts.append(tok)
                qs.append(q)
        if n:
            trim_prompt_cache(st.cache, n)  # draft KV was computed without the missing experts
        return drafts, _stack_q(qs)


class DraftModelDrafter(Drafter):
    """A small resident mlx-lm model with the same vocabulary, kept in step with its own cache."""

    name = "draft"

    def __init__(self, model, vocab_size: int):
        self.model = model
        if model.args.vocab_size != vocab_size:
            raise SpecdecError(
                f"draft model vocabulary {model.args.vocab_size} != target's {vocab_size}: "
                "a draft model must share the target's tokenizer"
            )
        self.cache = make_prompt_cache(model)
        self.pending: list[int] = []
        self.fed_drafts = 0

    def _logits(self, tokens: list[int]) -> np.ndarray:
        return np.array(self.model(mx.array([tokens]), cache=self.cache)[0, -1].astype(mx.float32))

    def start(self, st: DecodeState) -> None:
        self._logits(st.tokens[:-1])
        self.pending = [st.tokens[-1]]

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        drafts, qs = [], []
        if n:
            logits = self._logits(self.pending)
            for j in range(n):
                tok, q = st.pick(logits)
                drafts.append(tok)
                qs.append(q)
                if j < n - 1:
                    logits = self._logits([tok])
        self.fed_drafts = max(n - 1, 0)
        return drafts, _stack_q(qs)

    def commit(self, st: DecodeState, drafts: list[int], verdict: Verdict) -> None:
        kept = min(verdict.accepted, self.fed_drafts)
        if self.fed_drafts > kept:
            trim_prompt_cache(self.cache, self.fed_drafts - kept)
        self.pending = drafts[kept : verdict.accepted] + [verdict.tokens[-1]]


class LookupDrafter(Drafter):
    """Prompt lookup: continue the latest earlier occurrence of the trailing n-gram (n = 3, 2, 1)."""

    name = "lookup"

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        toks = st.tokens
        if n == 0:
            return [], None
        for size in range(self.max_ngram, 0, -1):
            if len(toks) <= size:
                continue
            tail = toks[-size:]
            for start in range(len(toks) - size - 1, -1, -1):
                if toks[start : start + size] == tail:
                    cont = toks[start + size : start + size + n]
                    return (cont + [cont[-1]] * (n - len(cont)))[:n], None
        return [toks[-1]] * n, None


class OracleDrafter(Drafter):
    """Acceptance-controlled drafts for calibrated sweeps (greedy decoding only).

    Draft j of a pass proposes the target's greedy token at that position (known from a plain
    run, `reference`) with probability α, otherwise a different token; so each judged draft is
    accepted with probability α, and the rejected ones route wherever a wrong token routes.
    """

    name = "oracle"

    def __init__(self, alpha: float, reference: list[int], vocab_size: int, seed: int = 0):
        if not 0 <= alpha <= 1:
            raise SpecdecError(f"oracle acceptance must be in [0, 1] (got {alpha})")
        self.alpha, self.reference, self.vocab = alpha, reference, vocab_size
        self.rng = np.random.default_rng(seed + 7919)

    def propose(self, st: DecodeState, n: int) -> tuple[list[int], np.ndarray | None]:
        if st.temp != 0:
            raise SpecdecError("the oracle drafter needs greedy decoding (--temp 0)")
        m = len(st.generated)
        out = []
        for j in range(n):
            i = m + j
            truth = self.reference[i] if i < len(self.reference) else None
            if truth is not None and self.rng.random() < self.alpha:
                out.append(truth)
            else:
                other = int(self.rng.integers(self.vocab - 1))
                out.append(other + (truth is not None and other >= truth))
        return out, None


def make_drafter(spec: str, sm, reference: list[int] | None = None, seed: int = 0) -> Drafter:
    """Build a drafter from its CLI spec (`none`, `mtp`, `self`, `lookup`, `oracle:0.9`, `draft:PATH`)."""
    name, _, arg = spec.partition(":")
    vocab = int(sm.model.args.vocab_size)
    if name == "none":
        return Drafter()
    if name == "mtp":
        if sm.mtp is None:
            raise SpecdecError(
                f"drafter mtp: {sm.path} has no MTP weights (mtp.safetensors); use a model with an "
                "MTP module (specdec extract-mtp HF_DIR OUT) or another drafter (self, lookup)"
            )
        return MTPDrafter(sm.mtp, sm.model)
    if name == "self":
        return SelfDrafter()
    if name == "lookup":
        return LookupDrafter()
    if name == "oracle":
        try:
            alpha = float(arg)
        except ValueError:
            alpha = -1.0
        if not 0 <= alpha <= 1:  # also NaN
            raise SpecdecError(
                f"drafter {spec!r}: write oracle:ALPHA with 0 <= ALPHA <= 1, e.g. oracle:0.9"
            )
        if reference is None:
            raise SpecdecError("the oracle drafter needs the plain greedy continuation")
        return OracleDrafter(alpha, reference, vocab, seed)
    if name == "draft":
        return DraftModelDrafter(_load_draft_model(arg), vocab)
    raise SpecdecError(
        f"unknown drafter {spec!r}: use none, mtp, self, lookup, oracle:ALPHA or draft:PATH"
    )


def _load_draft_model(path: str):
    """The draft model of `draft:PATH`, loaded whole by mlx-lm (it must fit in memory)."""
    from mlx_lm.utils import load as mlx_load

    from specdec.model.loader import resolve

    if not path:
        raise SpecdecError("drafter 'draft:' needs a model: write draft:PATH (an mlx-lm model dir)")
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
