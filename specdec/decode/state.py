"""What a drafter sees of the decode: the model, the main KV cache, the committed tokens, and
`forward` (one main-model call), which the loop and the self-drafter share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np

from specdec.core.accelerator import to_host
from specdec.core.errors import SpecdecError
from specdec.decode.sampling import probs, sample
from specdec.stream.steplog import Call

if TYPE_CHECKING:  # the loader imports mlx-lm (seconds): not for `--help`
    from specdec.stream.loader import StreamedModel


@dataclass
class DecodeState:
    sm: StreamedModel
    cache: list  # mlx-lm prompt cache of the main model
    tokens: list[int]  # prompt + committed; the last one (y) is committed but not yet fed
    n_prompt: int
    temp: float
    rng: np.random.Generator
    hidden: mx.array | None = None  # [1, T, ...] the MTP's state from the last main forward

    @property
    def generated(self) -> list[int]:
        """The committed tokens after the prompt (a copy)."""
        return self.generated_since(0)

    def generated_since(self, n: int) -> list[int]:
        """The committed tokens after the first `n` generated ones (a copy)."""
        return self.tokens[self.n_prompt + n :]

    @property
    def n_generated(self) -> int:
        """How many tokens are committed after the prompt, without copying them (the loop asks
        every token: a copy of a long run's tokens each time made it quadratic)."""
        return len(self.tokens) - self.n_prompt

    def pick(self, logits: np.ndarray) -> tuple[int, np.ndarray | None]:
        """A draft token from logits or log-probabilities [V]: argmax at temp 0, else a sample
        with its q."""
        if self.temp == 0:
            return int(logits.argmax()), None
        q = probs(logits, self.temp)
        return sample(q, self.rng), q


def log_probs(logits: mx.array) -> mx.array:
    """[1, T, V] logits -> [T, V] log-probabilities, each row computed as mlx-lm's
    `generate_step` computes a decode's: on its own ([1, V]) in the logits' dtype, logits -
    logsumexp. Greedy decoding takes their argmax, the lowest index among equals, as mlx-lm's
    greedy sampler does. In bfloat16 the subtraction rounds logits a step apart to one value
    (a step is 1/16 at -10: a flat distribution's top), so the float32 logits' argmax can be
    another token than mlx-lm's greedy output (1-2 of 8 held-out prompts within 32 tokens on
    4-bit bfloat16 Qwen3-MoE, Mixtral, Qwen2-MoE and gpt-oss checkpoints:
    tests/decode/test_greedy_rule.py)."""
    rows = [logits[:, i, :] for i in range(logits.shape[1])]  # [1, V] each, as a decode's
    out = [r - mx.logsumexp(r, keepdims=True) for r in rows]
    return out[0] if len(out) == 1 else mx.concatenate(out)  # [T, V]


def forward(
    st: DecodeState, tokens: list[int], want_hidden: bool, call: Call | None = None
) -> np.ndarray:
    """One main-model call on `tokens` (appended to the KV cache); returns their
    log-probabilities [T, V] (`log_probs`, float32 on the host).
    call: how its MoE calls are served (default: as the phase the caller is in)."""
    if call is not None:
        with st.sm.streamer.serving(call):
            return forward(st, tokens, want_hidden)
    return np.array(log_probs(_call(st, tokens, want_hidden)).astype(mx.float32))  # [T, V]


def forward_greedy(
    st: DecodeState, tokens: list[int], want_hidden: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`forward` as greedy decoding judges it: each position's argmax [T] and its
    log-probability [T] (float32), taken where the log-probabilities are, by `mx.argmax` as
    plain decoding takes its token (loop.greedy_next); only those 2·T values reach the host,
    not T rows of the vocabulary (200k on MiniMax-M2.5)."""
    return greedy_picks(log_probs(_call(st, tokens, want_hidden)))


def argmax_picks(lp: mx.array) -> tuple[mx.array, mx.array]:
    """[T, V] log-probabilities -> lazily, [T] argmax (the lowest index among equals: mlx-lm's
    greedy sampler) and [T] its log-probability: greedy decoding's pick, plain or verify."""
    target = mx.argmax(lp, axis=-1)  # [T]
    return target, mx.take_along_axis(lp, target[:, None], axis=-1)[:, 0]


def greedy_picks(lp: mx.array) -> tuple[np.ndarray, np.ndarray]:
    """argmax_picks on the host, the log-probabilities as float32 (γ values each: to_host's
    small read, not np.array's move into managed memory on CUDA)."""
    target, chosen = argmax_picks(lp)
    chosen = chosen.astype(mx.float32)
    mx.eval(target, chosen)  # one wait for both
    return to_host(target), to_host(chosen)


def feed(st: DecodeState, tokens: list[int], want_hidden: bool) -> None:
    """`tokens` appended to the KV cache where nothing judges them (a prefill's head, a
    re-feed): only what later calls read is evaluated, the KV cache and the MTP's state, as
    mlx-lm's prefill evaluates only its cache, so the LM head over them is never computed. An
    output left lazy (the last MoE layer's) is safe: the source evaluates its pending outputs
    before their slots are refilled (stream/source.py `flush`)."""
    _call(st, tokens, want_hidden)
    mx.eval([c.state for c in st.cache], *([st.hidden] if want_hidden else []))


def _call(st: DecodeState, tokens: list[int], want_hidden: bool) -> mx.array:
    """The main model on `tokens` [T], lazy: logits [1, T, V]; st.hidden set where wanted."""
    begin_routing(st, len(tokens))
    x = mx.array([tokens])  # [1, T]
    model = st.sm.model
    if want_hidden:  # the MTP module's starting state ([1, T, H]; V4: its streams [1, T, hc, H])
        st.hidden, out = st.sm.mtp.main_hidden(model, x, st.cache)
        return model.lm_head(out)
    return model(x, cache=st.cache)


def begin_routing(st: DecodeState, n: int) -> None:
    """Given routing (decode/trace_routing.py) learns the positions of the forward about to run:
    from the KV cache's offset, the position of its first token."""
    routing = st.sm.streamer.route_override
    if routing is not None:
        start = next((c.offset for c in st.cache if hasattr(c, "offset")), None)
        if start is None:
            raise SpecdecError("trace routing needs a model with a KV cache (its offset)")
        routing.begin(int(start), n)
