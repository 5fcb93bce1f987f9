"""Record routing traces from a streamed model (what `specdec trace record` runs).

    rec = record("tiny", prompts="heldout", max_tokens=32)       # -> Recording(trace, inputs)
    save_trace(rec.trace, "runs/trace-heldout")

Recording runs plain greedy decoding (γ = 1) over each prompt with the cache budget at 100%, so
nothing is re-read needlessly, and keeps, per position and MoE layer: the routed experts (from
the decode's routing recorder, specdec.decode.routing: the very ids the streamed block computed
with), their gates and the router lookahead of layer L on the MLP input of layer L - d (both
from the family's `route` on the same input, see specdec.probes.capture), the input token, the
prompt id and the phase (0 prefill, 1 decode). Experts are stored sorted within each position
(a set), gates aligned with them. The trace format itself is specdec.trace (data only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.progress import progress
from specdec.decode.drafters import Drafter
from specdec.decode.loop import Decode, DecodeConfig
from specdec.decode.routing import recording
from specdec.decode.run import eos_ids
from specdec.probes.capture import MoETap
from specdec.trace.format import Trace
from specdec.trace.prompts import load_prompts


@dataclass
class Recording:
    """A recorded trace and, when asked for, each MoE layer's input per position."""

    trace: Trace
    inputs: dict[int, np.ndarray] | None  # model layer id -> [T, H] float32


def record_trace(
    sm,
    prompts: list[list[int]],
    max_tokens: int = 32,
    distances: tuple[int, ...] = (1, 2, 3),
    keep_inputs: bool = False,
    model_name: str = "",
) -> Recording:
    """Run plain greedy decoding on each prompt (token ids) and record its routing."""
    streamer = sm.streamer
    lids = sm.main_moe_layers
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("experts", "gates", "tokens", "prompt_ids", "phase", "lookahead")
    }
    inputs: dict[int, list[np.ndarray]] = {lid: [] for lid in lids}
    for pid, prompt in enumerate(progress(prompts, desc="trace record", unit="prompt")):
        with recording(sm) as rec, MoETap(sm.model, sm.family, distances, keep_inputs) as tap:
            run = Decode(sm, prompt, Drafter(), DecodeConfig(1, max_tokens), (), eos_ids(sm))
            for _ in run.passes():
                pass
        # pipelined greedy decoding may build the forward after an EOS before reading it; the
        # decode drops that forward's cache steps and says so: it routed nothing, not a position
        seen, calls = rec.calls, tap.calls[: len(tap.calls) - run.discarded]
        if len(seen) != len(calls) * len(lids):
            raise SpecdecError(
                f"prompt {pid}: {len(seen)} routed MoE calls for {len(calls)} forward calls of "
                f"{len(lids)} MoE layers: the model calls its MoE blocks in an unexpected order"
            )
        for c, call in enumerate(calls):
            rows = seen[c * len(lids) : (c + 1) * len(lids)]
            _add_call(call, rows, lids, distances, cols, inputs if keep_inputs else None)
            cols["phase"].append(np.full(call.n_positions, 0 if rows[0][2] == "prefill" else 1))
        n_pos = sum(call.n_positions for call in calls)
        cols["tokens"].append(np.array((list(prompt) + run.generated)[:n_pos], dtype=np.int64))
        cols["prompt_ids"].append(np.full(n_pos, pid, dtype=np.int32))
    index = streamer.index
    cat = {k: np.concatenate(v, axis=1 if k == "lookahead" else 0) for k, v in cols.items() if v}
    trace = Trace(
        experts=cat["experts"].astype(np.int32),
        n_experts=streamer.key_stride,
        expert_bytes=[index.expert_bytes(lid) for lid in lids],
        model=model_name,
        # the resolved model and its content hash: a name alone may mean another model
        source=f"specdec trace record: {sm.source or sm.path} (model hash {sm.model_hash})",
        layer_ids=lids,
        gates=cat["gates"].astype(np.float32),
        tokens=cat["tokens"],
        prompt_ids=cat["prompt_ids"],
        phase=cat["phase"].astype(np.int8),
        lookahead=cat["lookahead"].astype(np.int32) if distances else None,
        lookahead_distances=list(distances),
    )
    trace.validate("recorded trace")
    kept = {lid: np.concatenate(v) for lid, v in inputs.items()} if keep_inputs else None
    return Recording(trace, kept)


def _add_call(call, rows, lids, distances, cols, inputs) -> None:
    """One forward call's rows: experts [T, L, k] sorted per position, gates aligned."""
    experts, gates = [], []
    for (layer, idx, _), lid in zip(rows, lids, strict=True):
        real = np.sort(idx.reshape(call.n_positions, -1), axis=-1)  # [T, k]
        inds, scores = call.route[lid]  # [T, k] each, the family route on the same input
        order = np.argsort(inds, axis=-1)
        inds = np.take_along_axis(inds, order, -1)
        if layer != lid or not np.array_equal(inds, real):
            raise SpecdecError(
                f"layer {lid}: the family route disagrees with the block's own routing: "
                "fix its adapter in specdec/checkpoint/families.py"
            )
        experts.append(real)
        gates.append(np.take_along_axis(scores, order, -1))
        if inputs is not None:
            inputs[lid].append(call.inputs[lid])
    cols["experts"].append(np.stack(experts, axis=1))
    cols["gates"].append(np.stack(gates, axis=1))
    if distances:
        k = experts[0].shape[-1]
        la = np.full((len(distances), call.n_positions, len(lids), k), -1, dtype=np.int64)
        for i, d in enumerate(distances):
            for j, lid in enumerate(lids):
                if (d, lid) in call.lookahead:
                    la[i, :, j] = np.sort(call.lookahead[(d, lid)], axis=-1)
        cols["lookahead"].append(la)


def record(
    model: str,
    prompts: str = "heldout",
    max_tokens: int = 32,
    max_prompt_tokens: int = 256,
    distances: tuple[int, ...] = (1, 2, 3),
    keep_inputs: bool = False,
    split: str = "train",
    limit: int | None = None,
    text_field: str | None = None,
    sm=None,
) -> Recording:
    """Load `model` (or use the loaded `sm`) at budget 100% and record `prompts` (a spec)."""
    if max_prompt_tokens < 1:  # 0 would record every prompt as the one token 0
        raise SpecdecError(
            f"--max-prompt-tokens {max_prompt_tokens}: give at least 1 (prompts are cut to it)"
        )
    texts = load_prompts(prompts, split=split, limit=limit, field=text_field)
    if sm is None:
        from specdec.stream.loader import load

        sm = load(model, budget="100%", with_mtp=False)
    ids = [list(sm.tokenizer.encode(t))[:max_prompt_tokens] or [0] for t in texts]
    return record_trace(sm, ids, max_tokens, distances, keep_inputs, model_name=str(model))
