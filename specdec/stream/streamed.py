"""The streamed MoE block: routed experts come from the expert cache, not from resident memory.

`StreamedSwitchGLU` replaces a family's switch module (mlx-lm's `SwitchGLU` or `SwitchMLP`, found
by type: specdec.checkpoint.discover). On each call it reads the router's indices to the host, asks the
`Streamer` for the union of the call's experts (hits stay, misses are read from disk into arena
slots), remaps expert ids to slot ids, and runs the family's own switch module, whose
`SwitchLinear` projections are swapped for `ArenaLinear`s that call `mx.gather_(q)mm` on views of
the arena (a mixed-precision pack: two arenas, stream/mixed.py): only where the weights are read
changes. On CUDA, an arena larger than MLX's gather kernels can address (`GatherReach`: 2^32
weight elements) computes each call on copies of the experts it names (`SlotCopy`), the same
bits. The switch module's structure and activation (gpt-oss's and DeepSeek-V4.1's clamped
SwiGLU, SwitchMLP's GELU), expert biases and everything else in the family's block (gate
weighting, shared experts) are the family's own code, so streamed logits equal resident logits.

A call whose union exceeds one cache step (`ExpertCache.max_step`: the slots, or static's
scratch slots) is computed in chunks of positions whose union fits, each chunk evaluated before
the next read can overwrite its slots; so any budget of at least one position's top-k works.
Outputs stay lazy (one host sync per MoE layer, the router's), but every output still pending
is evaluated before a read may overwrite a slot: no lazy graph ever computes on a slot that was
refilled under it. In a verify pass's decode form (specdec/decode/verify_form.py) a call keeps
its one cache step for the union of its positions' experts and computes each position in a
switch call of its own, shaped as one-token decoding's (`_compute`).

No sync where no read can be needed: when every expert of a layer is resident (full budget, a
layer pinned whole) and no read is landing, the call remaps ids on the device through the
layer's expert -> slot table (`ExpertSource.table`), or, where the layer's experts sit in one
run of slots in expert order (--warm), computes on that window of the arena with the router's
own ids, the graph mlx-lm builds node for node; and it defers its host part (where the cache
holds every expert it starts no evaluation either: the token is one graph, as in mlx-lm): the
cache step, the observers and the step log run from `Streamer.catch_up`, in call order, before any
other cache step and before the log is drained, so stats and records equal the synced path's.
A lookahead whose target layer is wholly resident is skipped: its prefetch would read nothing.
A call served resident-only (`Call.resident_only`, the cache-only self-drafter) reads nothing:
experts not resident are dropped and the kept gate mass renormalised. A failed read (or lookahead read) makes the cache forget its keys, so no
slot holding a partial or stale block is ever computed on (tests/e2e/test_fault_injection.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from specdec.checkpoint.discover import SWITCH_TYPES, projections
from specdec.checkpoint.families import Route
from specdec.core.accelerator import on_cuda, to_host
from specdec.core.errors import SpecdecError
from specdec.store.arena import Arena
from specdec.store.layout import LayerLayout
from specdec.store.pools import PoolArenas, members
from specdec.stream.mixed import on_pools
from specdec.stream.source import SlotTable
from specdec.stream.streamer import Streamer, union


class _Hidden:
    """Holds objects that must stay out of the module's parameter tree (views, back-references)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


@dataclass(frozen=True)
class GatherReach:
    """How far into an arena the backend's gather kernels find a slot's weights."""

    elements: int  # a slot starting this many kernel elements in or further is misread
    float_slots: int  # a float gather of sorted rows takes at most this many experts


# Measured on the H200 (`python benchmarks/bench_cuda.py offsets`, MLX 0.32.4): the CUDA quantized
# gather kernels (qmm_sm80, as 8 rows, 64 sorted rows and float32 activations run) take a slot's
# weights from (slot × out × in) elements, a product in 32 bits, so a slot at or past 2^32 such
# elements is read from the wrong place (one row, qmv, offsets in 64 bits and is right); float
# gather_mm of sorted rows refuses more than 1024 experts. An arena past either computes on copies.
CUDA_REACH = GatherReach(elements=2**32, float_slots=1024)
FEW_ROWS = 32  # a call of at most this many (position, expert) rows copies each row's expert


def gather_reach() -> GatherReach | None:
    """The backend's reach; None: no limit (the CPU's and Metal's kernels offset in 64 bits)."""
    return CUDA_REACH if on_cuda() else None


def _past_reach(weight: mx.array, bits: int | None) -> bool:
    """Whether a projection's weight view [slots, out, cols] runs past what the backend's gather
    kernels address."""
    reach = gather_reach()
    if reach is None:
        return False
    return _elements(weight, bits) > reach.elements or (
        bits is None and weight.shape[0] > reach.float_slots
    )


def _elements(view: mx.array, bits: int | None) -> int:
    """A view [slots, out, cols]'s size in the kernel's elements (a packed uint32 holds 32/bits)."""
    return view.size * 32 // bits if bits and view.dtype == mx.uint32 else view.size


class SlotCopy:
    """Where a call's rows find their experts once those are copied out of the arena: the slots
    to copy and each row's index into the copies. A switch call hands its projections the same
    indices array, so the map is made once per call (the memo holds that array: MLX arrays are
    immutable) and each projection only copies its own tensors.

    A call computed as several switch calls (a verify's decode form: one per position) copies
    the whole call's experts once (`whole_call`): each projection takes its tensors at the
    call's distinct slots once, and each position's rows index those copies through a slot ->
    copy table, instead of every position copying its own k experts again (on the H200 a γ = 8
    verify call past the reach spent ~1 ms a position more than one within it:
    docs/results/cuda.md). The copies hold the same bytes, so each position computes as before."""

    def __init__(self) -> None:
        self._last: tuple[mx.array, mx.array, mx.array] | None = None
        # inside whole_call: (picked [u] slots, [max slot + 1] slot -> copy, taken views by
        # projection)
        self._call: tuple[mx.array, mx.array, dict[int, dict]] | None = None

    def __call__(self, indices: mx.array) -> tuple[mx.array, mx.array]:
        """(picked [u] slots to copy, local [..., k] indices into the copies) for `indices`
        [..., k]: a call of few rows copies each row's expert (no host read), a longer one
        (prefill, sorted rows) its distinct slots, in slot order so sorted indices stay sorted;
        inside `whole_call`, the whole call's slots and these rows' places among them."""
        if self._last is None or self._last[0] is not indices:
            made = self._make(indices) if self._call is None else (
                self._call[0], self._call[1][indices])  # fmt: skip
            self._last = (indices, *made)
        return self._last[1], self._last[2]

    def copied(self, owner: nn.Module, views: dict, indices: mx.array) -> tuple[dict, mx.array]:
        """`owner`'s views taken at the call's experts, and `indices` [..., k] into them: inside
        `whole_call` taken once for the whole call, else for this call."""
        picked, local = self(indices)
        taken = {} if self._call is None else self._call[2]
        if id(owner) not in taken:
            taken[id(owner)] = {n: mx.take(v, picked, axis=0) for n, v in views.items()}
        return taken[id(owner)], local

    @contextlib.contextmanager
    def whole_call(self, slots: np.ndarray) -> Iterator[None]:
        """The switch calls made inside compute parts of one call on `slots` [..., k], known on
        the host: its distinct slots are copied once, each part indexes them."""
        used = np.unique(slots)  # [u] sorted
        lut = np.zeros(int(used[-1]) + 1, dtype=np.uint32)
        lut[used] = np.arange(len(used))
        self._last, self._call = None, (mx.array(used), mx.array(lut), {})
        try:
            yield
        finally:
            self._last, self._call = None, None

    @staticmethod
    def _make(indices: mx.array) -> tuple[mx.array, mx.array]:
        flat = indices.reshape(-1)  # [n]
        if flat.size <= FEW_ROWS:
            return flat, mx.arange(flat.size, dtype=indices.dtype).reshape(indices.shape)
        used = np.unique(to_host(flat))  # [u] sorted; a host read of the call's slots
        lut = np.zeros(int(used[-1]) + 1, dtype=np.uint32)
        lut[used] = np.arange(len(used))
        return mx.array(used), mx.array(lut)[indices]


class ArenaLinear(nn.Module):
    """One projection of every slot (or of the slots `rows`): mlx-lm's (Quantized)SwitchLinear
    computed on arena views. `copies`: the switch's slot map, used where this projection's views pass the gather
    kernels' reach (each row's kernel and weights are then the same: so are the results)."""

    def __init__(
        self,
        arena: Arena,
        layout: LayerLayout,
        proj: str,
        copies: SlotCopy,
        rows: slice | None = None,
    ):
        super().__init__()
        views = {
            t.name.split(".", 1)[1]: arena.tensor_view(t)
            for t in layout.tensors
            if t.name.split(".", 1)[0] == proj
        }
        if rows is not None:  # a window of slots, sharing the arena's memory (sliced once)
            views = {name: v[rows] for name, v in views.items()}
            mx.eval(list(views.values()))
        quant = layout.quant.get(proj)
        far = _past_reach(views["weight"], quant and quant.bits)
        self._h = _Hidden(views=views, quant=quant, copies=copies if far else None)

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False) -> mx.array:
        v, q = self._h.views, self._h.quant
        if self._h.copies is not None:  # past the kernels' reach: on the call's experts copied
            v, indices = self._h.copies.copied(self, v, indices)
        if q is not None:
            x = mx.gather_qmm(
                x,
                v["weight"],  # [slots, out, in * bits / 32]
                v["scales"],
                v.get("biases"),
                rhs_indices=indices,
                transpose=True,
                group_size=q.group_size,
                bits=q.bits,
                mode=q.mode,
                sorted_indices=sorted_indices,
            )
        else:
            x = mx.gather_mm(
                x,
                v["weight"].swapaxes(-1, -2),  # [slots, in, out]
                rhs_indices=indices,
                sorted_indices=sorted_indices,
            )
        if "bias" in v:
            x = x + mx.expand_dims(v["bias"][indices], -2)
        return x


def _on_arena(
    switch: nn.Module, arena: Arena, layout: LayerLayout, layer: int, rows: slice | None = None
) -> nn.Module:
    """`switch` with each projection an ArenaLinear on `arena` (blocks laid out as `layout`),
    on the slots `rows` (None: all, slot ids index the arena)."""
    copies = SlotCopy()  # one map per call for all of the switch's projections
    for proj in layout.projections:
        setattr(switch, proj, ArenaLinear(arena, layout, proj, copies, rows))
    # the map, where a projection computes on copies (a plain attribute: not a parameter)
    switch.slot_copy = copies if any(p._h.copies for p in _arena_linears(switch)) else None
    left = [name for name, _ in tree_flatten(switch.parameters())]
    if left:  # a parameter the arena does not hold would never be loaded
        raise SpecdecError(
            f"layer {layer}: {type(switch).__name__} has parameters outside its "
            f"projections ({left[0]}); specdec cannot stream this switch module"
        )
    return switch


def _arena_linears(switch: nn.Module) -> list[ArenaLinear]:
    return [p for p in switch.values() if isinstance(p, ArenaLinear)]


def _shallow_copy(module: nn.Module) -> nn.Module:
    """Another module of the same class sharing children (activation) until they are replaced."""
    twin = type(module).__new__(type(module))
    nn.Module.__init__(twin)
    dict.update(twin, module)
    twin.__dict__.update(module.__dict__)
    return twin


class StreamedSwitchGLU(nn.Module):
    """Drop-in for the family's switch module whose experts live in the streamer's arena.

    `original` (a SwitchGLU / SwitchMLP, weights never evaluated) becomes the computing module:
    each projection is replaced by an ArenaLinear; it is kept out of the parameter tree, so the
    model has no expert parameters left. route: the family's router adapter, or None."""

    streams_experts = True  # specdec.checkpoint.discover finds it where the switch module was
    _decode_form = False  # a verify pass in the decode form: one call per position (_compute)

    def __init__(
        self,
        streamer: Streamer,
        layer: int,
        original: nn.Module,
        block: nn.Module,
        route: Route | None,
    ):
        super().__init__()
        if not isinstance(original, SWITCH_TYPES):
            raise TypeError(f"layer {layer}: expected a switch module, got {type(original)}")
        layout = streamer.index.layers[layer]
        if set(projections(original)) != set(layout.projections):
            raise SpecdecError(
                f"layer {layer}: the model's experts have projections "
                f"{sorted(projections(original))} but experts.json packs "
                f"{sorted(layout.projections)}; re-pack the model (specdec pack --force)"
            )
        arena = streamer.arena
        if isinstance(arena, PoolArenas):  # a mixed pack: hot and cold blocks in two arenas
            hot, cold = (members(layout, c).any() for c in (False, True))
            twin = _shallow_copy(original)  # the same module computing on the cold arena
            switch = on_pools(
                _on_arena(original, arena.hot, layout, layer) if hot else None,
                _on_arena(twin, arena.cold, layout.cold, layer) if cold else None,
                arena.n_hot,
            )
        else:
            switch = _on_arena(original, arena, layout, layer)
        self._h = _Hidden(
            streamer=streamer,
            layer=layer,
            block=block,
            route=route,
            switch=switch,
            lut=np.zeros(layout.n_experts, dtype=np.int32),  # expert id -> slot, this call
            ids=arena.slot_ids,  # the slot ids' dtype the computing switch is given
            # first slot -> the switch on that window of a one-arena pack (_on_table);
            # None: a mixed pack, whose slot ids span two arenas
            windows=None if isinstance(arena, PoolArenas) else {},
        )

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        h = self._h
        s: Streamer = h.streamer
        src, phase = s.source, s.current.phase
        if s.current.resident_only:  # the cache-only self-draft: reads nothing
            s.catch_up()
            idx = s.routed(h.layer, s.sync(indices, None))  # [..., k] host sync
            s.log.observe(h.layer, idx, phase)
            return self._launch(self._resident_only(x, idx, union(idx)[0]))
        table = src.table(h.layer)
        ahead = None
        if h.layer in s.lookahead.ahead_of:
            ahead = s.lookahead.route(h.layer, x, table is not None, src, h.route)
        if table is not None and ahead is None:  # no read can be needed: no host sync
            if s.route_override is not None:  # given routing: known on the host already
                indices = mx.array(s.routed(h.layer, np.zeros(indices.shape, np.int32)), mx.uint32)
            y = self._on_table(x, indices, table)  # [..., k, H]
            s.deferred.add(h.layer, indices.shape[-1] if s.counts(indices) else indices, phase)
            return self._launch(y)
        s.catch_up()  # deferred steps come first: the cache sees calls in order
        idx = s.routed(h.layer, s.sync(indices, None if ahead is None else ahead[1]))
        y, experts = self._streamed(x, idx, phase)
        self._launch(y)
        if ahead is not None:  # reads overlap this layer's compute and the next layers'
            s.prefetch(ahead[0], ahead[1], (h.layer, experts, y), phase)  # y's slots: kept
        return y

    def _on_table(self, x: mx.array, indices: mx.array, table: SlotTable) -> mx.array:
        """The call on a wholly resident layer: where its experts sit in one run of slots, on
        that window of the arena with the router's ids as they are (mlx-lm's graph, node for
        node: on CUDA each node costs launch time); else on the slots its table gathers."""
        h = self._h
        if table.first is None or h.windows is None:
            return self._compute(x, table.slots[indices])
        window = h.windows.get(table.first)
        if window is None:
            rows = slice(table.first, table.first + h.lut.size)
            layout = h.streamer.index.layers[h.layer]
            window = _on_arena(_shallow_copy(h.switch), h.streamer.arena, layout, h.layer, rows)
            h.windows[table.first] = window
        return self._compute(x, indices, window)

    def _compute(
        self,
        x: mx.array,
        slots: mx.array,
        switch: nn.Module | None = None,
        host_slots: np.ndarray | None = None,
    ) -> mx.array:
        """The switch (the layer's, on every slot, unless given) on x [..., H] and slots
        [..., k] -> [..., k, H']: one call; in a verify pass's decode form
        (decode/verify_form.py) one call per position, shaped as a one-token decode call
        ([1, 1, H], [1, 1, k]), so each position's experts are computed by the kernels
        one-token decoding uses (a call's row count picks them). `host_slots`: the same slots on
        the host, where known: a switch on copies (past the gather kernels' reach) then copies
        the whole call's experts once for all its positions (`SlotCopy.whole_call`)."""
        switch = self._h.switch if switch is None else switch
        n = slots.size // slots.shape[-1]
        if not self._decode_form or n == 1:
            return switch(x, slots)
        xs, ss = x.reshape(n, 1, 1, -1), slots.reshape(n, 1, 1, -1)  # [N, 1, 1, H], [N, 1, 1, k]
        copy = getattr(switch, "slot_copy", None)  # None: within the reach, or a mixed pack's
        once = copy is not None and host_slots is not None
        with copy.whole_call(host_slots) if once else contextlib.nullcontext():
            y = mx.concatenate([switch(xs[i], ss[i]) for i in range(n)])  # [N, 1, k, H']
        return y.reshape(*slots.shape, -1)

    def _launch(self, y: mx.array) -> mx.array:
        """Start computing `y` while Python builds the next layer's graph; track its slots.
        Where the cache holds every expert no slot is ever refilled: nothing to track, and the
        token stays one lazy graph evaluated once, as mlx-lm runs it (on the H200 as fast as a
        start per layer: docs/results/cuda.md)."""
        s = self._h.streamer
        if not s.source.holds_all:
            mx.async_eval(y)
            s.source.track(y)
        if len(s.deferred) > s.deferred.BOUND:  # model calls with no drain between (probes)
            s.catch_up()
        return y

    def _streamed(self, x: mx.array, idx: np.ndarray, phase: str) -> tuple[mx.array, list[int]]:
        """The call on the slots `Streamer.steps` fills; returns its output and its experts.
        A call whose union exceeds one cache step (the slots; static: its scratch slots) is
        computed per group of positions whose union fits, each pending before the next reads."""
        h, s = self._h, self._h.streamer
        outs, used, start = [], [], 0
        for pos, experts, slots in s.steps(h.layer, idx, phase):
            h.lut[experts] = slots
            if pos is idx:  # the call fits one step
                at = h.lut[idx]  # [..., k] the call's slots
                y, used = self._compute(x, mx.array(at, h.ids), host_slots=at), experts
                continue
            flat_x = x.reshape(-1, x.shape[-1])  # [N, H]
            at = h.lut[pos]  # [n, k]
            out = self._compute(flat_x[start : start + len(pos)], mx.array(at, h.ids),
                                host_slots=at)  # fmt: skip
            s.source.pending.append(out)  # [n, k, H], evaluated before the next chunk's reads
            outs.append(out)
            used += experts
            start += len(pos)
        if outs:
            y = mx.concatenate(outs, axis=0).reshape(*idx.shape, -1)
        return y, used

    def _resident_only(self, x: mx.array, idx: np.ndarray, experts: list[int]) -> mx.array:
        """Cache-only self-draft: drop experts not resident, renormalise the kept gate mass.

        The family multiplies our output by its gate scores; scaling each kept expert's output by
        (sum of all scores) / (sum of kept scores) and zeroing dropped ones turns that into the
        renormalised mixture over resident experts. A position with nothing resident gets only
        the shared expert (if the family has one). The scale stays lazy: no second host sync.
        """
        h = self._h
        h.lut[experts] = h.streamer.source.resident_slots(h.layer, experts)
        slots = h.lut[idx]  # [..., k], -1 where not resident
        keep = mx.array(slots >= 0)
        _, scores = h.route(h.block, x)  # [..., k], the family's own gate values
        scores = scores.astype(mx.float32)
        kept_mass = (scores * keep).sum(-1, keepdims=True)  # [..., 1]
        scale = mx.where(
            kept_mass > 0, scores.sum(-1, keepdims=True) / mx.maximum(kept_mass, 1e-30), 0.0
        )
        y = h.switch(x, mx.array(np.where(slots >= 0, slots, 0), h.ids))  # [..., k, H]
        return (y * (keep * scale)[..., None]).astype(y.dtype)
