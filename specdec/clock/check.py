"""The device model checked against the seed question's own runs (`reproduce`; the command is
`specdec clock check`, in specdec.cli.clock).

The check feeds the device model the parameters of each run the seed question reports on its
24 GB M4 (MiniMax-M2.5 at 4 bits, one token per forward, LRU) and compares modeled with
measured tokens/s. Misses per token are what the run itself reports: a hit rate (of 62 × 8
routed accesses per token) or bytes read per token (÷ one 4-bit block). The bundled profile
must land within `TOLERANCE` of each (tests/clock/test_clock_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.clock.profiles import DeviceProfile
from specdec.clock.roofline import Forward, ModeledTime, ReadStep, forward_time
from specdec.clock.shapes import ModelShape

TOLERANCE = 0.20
CONTEXT = 512  # assumed: a short prompt plus 32 decoded tokens; KV reads are < 0.1% at this size
# MiniMax-M2.5's config.json (Hugging Face MiniMaxAI/MiniMax-M2.5, as MiniMax-M2), 4-bit mlx.
MINIMAX_M25 = {
    "model_type": "minimax",
    "vocab_size": 200064,
    "hidden_size": 3072,
    "intermediate_size": 1536,
    "num_hidden_layers": 62,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "shared_intermediate_size": 0,
    "quantization": {"bits": 4, "group_size": 64},
}


@dataclass(frozen=True)
class QuestionRun:
    label: str
    measured_tps: float
    source: str
    hit_rate: float | None = None  # of routed accesses
    gb_per_token: float | None = None  # bytes read per token, 1e9
    checked: bool = True  # False: shown, not held to TOLERANCE (see its source)


QUESTION_RUNS = (
    QuestionRun(
        "LRU, the §2 baseline run",
        2.34,
        "§2: 2.34 t/s with hit rate 75.3% (L+2 lookahead off)",
        hit_rate=0.753,
    ),
    QuestionRun(
        "LRU, 8 GB ceiling",
        2.00,
        "§1 SLRU table: 48.56 GB read over 32 tokens",
        gb_per_token=48.56 / 32,
    ),
    QuestionRun(
        "LRU, 10 GB ceiling",
        2.29,
        "§1 SLRU table: 40.53 GB read over 32 tokens",
        gb_per_token=40.53 / 32,
    ),
    QuestionRun(
        "53% hits at 9 GB (trace replay, not a run)",
        2.34,
        "§1: LRU 53.0% at 9 GB replaying its trace; 47% of 496 4-bit blocks at 2.62 GB/s is "
        "0.71 s of reads per token, so 2.34 t/s cannot come with it",
        hit_rate=0.53,
        checked=False,
    ),
)


def spread_reads(shape: ModelShape, misses: float) -> tuple[ReadStep, ...]:
    """`misses` expert reads spread evenly over the MoE layers, rounded so they sum to it."""
    layers = sorted(shape.moe_layers)
    steps, done = [], 0
    for i, layer in enumerate(layers):
        n = round(misses * (i + 1) / len(layers)) - done
        done += n
        steps.append(ReadStep(layer, n, int(n * shape.expert_block_bytes)))
    return tuple(steps)


def token_forward(shape: ModelShape, misses_per_token: float) -> Forward:
    """One decode token of `shape`: top-k per MoE layer, misses spread evenly over the layers."""
    unions = {layer: shape.top_k for layer in sorted(shape.moe_layers)}
    steps = spread_reads(shape, misses_per_token)
    return Forward(1, CONTEXT, tuple(range(shape.n_layers)), unions, steps)


def reproduce(profile: DeviceProfile) -> list[tuple[QuestionRun, ModeledTime]]:
    """Each of the question's M4 runs, modeled on `profile`."""
    shape = ModelShape.from_config(MINIMAX_M25)
    accesses = len(shape.moe_layers) * shape.top_k
    out = []
    for run in QUESTION_RUNS:
        if run.hit_rate is not None:
            misses = (1 - run.hit_rate) * accesses
        else:
            misses = run.gb_per_token * 1e9 / shape.expert_block_bytes
        out.append((run, forward_time(profile, shape, token_forward(shape, misses))))
    return out
