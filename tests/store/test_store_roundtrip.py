"""Pack tiny random checkpoints, read every expert block back through the reader, compare.

Run: `pytest tests/store/test_store_roundtrip.py`. Everything is on real files in pytest's tmp dir
(on the real disk, so O_DIRECT works); the reference is the mlx-lm model's own parameters.
"""

from __future__ import annotations

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from mlx.utils import tree_flatten

from specdec.checkpoint.random_models import make_random
from specdec.pack.pack import pack
from specdec.store.arena import Arena, block_layout
from specdec.store.layout import MTP_FILE, RESIDENT, ExpertIndex
from specdec.store.reader import IO_MODES, ExpertReader
from tests.helpers import pinned_stand_in

CASES = [
    ("deepseek_v3", None),
    ("deepseek_v3", 4),
    ("mixtral", 3),
    ("qwen3_moe", 2),
    ("minimax", 8),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1] or 'f32'}")
def packed(request, tmp_path_factory):
    family, bits = request.param
    root = tmp_path_factory.mktemp(f"{family}-{bits}")
    model_dir = make_random(family, root / "model", bits=bits, seed=1)
    out = pack(model_dir, root / "packed")
    model, _ = mlx_lm.load(str(model_dir))
    params = dict(tree_flatten(model.parameters()))
    if (model_dir / "mtp.safetensors").exists():
        params.update(mx.load(str(model_dir / "mtp.safetensors")))
    return family, bits, out, ExpertIndex.load(out), params


def test_index_covers_every_switch_mlp_tensor(packed):
    family, bits, out, index, params = packed
    expert_names = {k for k in params if ".switch_mlp." in k}
    indexed = {f"{ly.prefix}.{t.name}" for ly in index.layers.values() for t in ly.tensors}
    assert indexed == expert_names
    for ly in index.layers.values():
        for q in ly.quant.values():
            assert (q is None) == (bits is None)
            if q is not None:
                assert (q.bits, q.group_size, q.mode) == (bits, 64, "affine")
    if family == "deepseek_v3":  # the MTP layer's experts are packed as layer num_hidden_layers
        assert max(index.layer_ids) == 3


@pytest.mark.parametrize("io", IO_MODES)
def test_every_block_reads_back_exactly(packed, io, monkeypatch):
    """Every io mode; pinned through a stand-in for the copy engine on a CPU (HostCopyStandIn)."""
    made = pinned_stand_in(monkeypatch) if io == "pinned" else []
    _, _, out, index, params = packed
    n_slots = 5  # fewer slots than experts: slots are reused, as in a cache
    arena = Arena(n_slots, index.slot_bytes, block_layout(index))
    with ExpertReader(out, index, arena, io=io, threads=3, verify_checksums=True) as reader:
        misses = 0
        for lid in index.layer_ids:
            ly = index.layers[lid]
            order = np.random.default_rng(lid).permutation(ly.n_experts)
            for first in range(0, ly.n_experts, n_slots):
                batch = [(lid, int(e), s) for s, e in enumerate(order[first : first + n_slots])]
                reader.read(batch)
                misses += len(batch)
                for spec in ly.tensors:
                    view = arena.tensor_view(spec)  # [n_slots, *spec.shape]
                    ref = params[f"{ly.prefix}.{spec.name}"]  # [E, *spec.shape]
                    for _, e, s in batch:
                        assert view[s].dtype == ref.dtype
                        assert mx.array_equal(view[s], ref[e]).item(), (lid, e, spec.name)
        assert reader.stats.reads == misses == index.n_blocks
        assert reader.stats.bytes_read == sum(
            ly.n_experts * ly.block_bytes for ly in index.layers.values()
        )
        # where the batches' thread-time went: reading always; landing where a staging buffer
        # was copied from (pinned, or O_DIRECT staged); waking, as pool workers joined batches
        # of 5 blocks on 3 threads
        st = reader.stats
        assert st.io_s > 0 and st.wake_s > 0 and (st.land_s > 0) == (st.staged > 0), st
        if made:  # every byte landed by the copy engine's stand-in, through pinned staging
            assert made[0].landed == reader.stats.bytes_read
            assert reader.stats.staged >= reader.stats.reads and made[0].pinned
    if made:
        assert made[0].closed and not made[0].pinned


def max_layer(params) -> int:
    return max(int(k.split(".")[2]) for k in params if k.startswith("model.layers."))


def test_resident_holds_every_other_tensor(packed):
    """model.safetensors + mtp.safetensors hold every non-expert tensor, each in its own file."""
    _, _, out, _, params = packed
    resident = mx.load(str(out / RESIDENT))
    mtp = mx.load(str(out / MTP_FILE)) if (out / MTP_FILE).exists() else {}
    assert not set(resident) & set(mtp)
    assert all(k.startswith(f"model.layers.{max_layer(params)}.") for k in mtp)
    resident.update(mtp)
    assert set(resident) == {k for k in params if ".switch_mlp." not in k}
    for k, v in resident.items():
        assert mx.array_equal(v, params[k]).item(), k


def test_gather_qmm_on_arena_view_matches_stacked_weights(packed):
    """The lead's compute path: gather_(q)mm on the arena's views equals the resident one."""
    _, bits, out, index, params = packed
    lid = index.layer_ids[0]
    ly = index.layers[lid]
    arena = Arena(ly.n_experts, index.slot_bytes, block_layout(index))
    experts = list(range(ly.n_experts))[::-1]  # slot s holds expert E-1-s
    with ExpertReader(out, index, arena, io="buffered") as reader:
        reader.read([(lid, e, s) for s, e in enumerate(experts)])
    x = mx.random.normal((2, 1, 64), key=mx.random.key(0))  # [tokens, 1, hidden]
    idx = mx.array([[0, 3], [5, 1]])  # [tokens, k] expert ids
    slots = mx.array([[experts.index(int(e)) for e in row] for row in idx.tolist()])
    ref = {
        k.rsplit(".", 1)[1]: v for k, v in params.items() if k.startswith(f"{ly.prefix}.gate_proj.")
    }
    view = {
        t.name.rsplit(".", 1)[1]: arena.tensor_view(t)
        for t in ly.tensors
        if t.projection == "gate_proj"
    }
    if bits is None:
        want = mx.gather_mm(x, ref["weight"].swapaxes(-1, -2), rhs_indices=idx)
        got = mx.gather_mm(x, view["weight"].swapaxes(-1, -2), rhs_indices=slots)
    else:
        kw = dict(transpose=True, group_size=64, bits=bits)
        want = mx.gather_qmm(x, ref["weight"], ref["scales"], ref["biases"], rhs_indices=idx, **kw)
        got = mx.gather_qmm(
            x, view["weight"], view["scales"], view["biases"], rhs_indices=slots, **kw
        )
    assert mx.array_equal(want, got).item()


def test_bf16_sharded_checkpoint_keeps_dtype_and_bytes(tmp_path):
    """Real checkpoints are bf16 and sharded, with one layer's experts spread over shards."""
    src = make_random("qwen2_moe", tmp_path / "f32", seed=2)
    weights = mx.load(str(src / "model.safetensors"))
    weights = {k: v.astype(mx.bfloat16) for k, v in weights.items()}  # [E, out, in] stay stacked
    model_dir = tmp_path / "bf16"
    model_dir.mkdir()
    names = sorted(weights)
    shards = [names[0::2], names[1::2]]  # gate/up/down of a layer land in different files
    for i, shard in enumerate(shards):
        mx.save_safetensors(
            str(model_dir / f"model-{i + 1:05d}-of-00002.safetensors"),
            {k: weights[k] for k in shard},
            metadata={"format": "mlx"},
        )
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (model_dir / f).write_bytes((src / f).read_bytes())
    out = pack(model_dir, tmp_path / "packed")
    index = ExpertIndex.load(out)
    assert {t.dtype for ly in index.layers.values() for t in ly.tensors} == {"BF16"}
    arena = Arena(4, index.slot_bytes, block_layout(index))
    with ExpertReader(out, index, arena, io="direct", verify_checksums=True) as reader:
        for lid in index.layer_ids:
            ly = index.layers[lid]
            reader.read([(lid, e, s) for s, e in enumerate([3, 0, 15, 7])])
            for spec in ly.tensors:
                view = arena.tensor_view(spec)
                ref = weights[f"{ly.prefix}.{spec.name}"]
                assert view.dtype == mx.bfloat16
                for s, e in enumerate([3, 0, 15, 7]):
                    assert mx.array_equal(view[s], ref[e]).item()
    resident = mx.load(str(out / RESIDENT))
    assert all(v.dtype == mx.bfloat16 for v in resident.values())
    # the bf16 checkpoint itself is valid for mlx-lm (MLX's CPU gather_mm computes in float32
    # only, so it is not run here)
    model, _ = mlx_lm.load(str(model_dir))
    assert model.model.layers[0].mlp.switch_mlp.gate_proj.weight.dtype == mx.bfloat16
