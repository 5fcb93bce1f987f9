"""The device model: modeled seconds of one forward, and of one verify pass, on a device profile.

    t = forward_time(profile, shape, Forward(positions=4, context=300, layers=range(5),
                     unions={1: 13, 2: 11, 3: 12, 4: 14}, steps=(...)))
    t.total_s, t.compute_s, t.sync_s, t.read_s

Per layer, in order, as the runtime executes it:

1. attention: roofline time of its weight + KV bytes and FLOPs (`ModelShape.attention_cost`);
2. MoE layers: the router's host sync (`profile.router_sync_s`; in a decode-form verify forward,
   `positionwise`, each position past the first adds `profile.position_s`: its one-token calls'
   own launches and host work beyond their roofline), then layer L's misses are issued
   (never earlier: their ids are known only now; a call that reads pays `profile.miss_call_s`
   for doing so, host work beyond the reads themselves) and the experts wait for them. A prefetch
   (router lookahead, a step with `prefetched` > 0 logged after the layer that issued it) starts
   when its issuing layer's reads are done and lands while later layers compute; the target
   layer waits only for what is still in flight. The disk serves one batch at a time (reads
   queue behind earlier ones). With `profile.overlap_reads` the shared and resident experts'
   share of the MLP computes while the misses land (ds4); without it (this harness: the reads
   finish before the layer's experts run) nothing overlaps a layer's own misses;
3. where the accelerator does not compute on host memory where it lies (`land_gbps`: CUDA managed
   memory migrates a page on the GPU's first touch), the layer's blocks just read first reach it
   (bytes / land_gbps, or at `land_curve`'s rate for that many blocks in one call; nothing
   overlapped: the experts wait for them);
4. the MLP: roofline time of shared + router + union × expert bytes and FLOPs;
5. the LM head once per forward.

A decode-form verify forward (`positionwise`: specdec.decode.verify_form, each position's calls
are one-token calls of their own) computes as T one-position forwards do: attention, dense MLP,
router, shared experts and head T times over their weights, each position on its own top-k
experts, while the disk reads the positions' union once, as logged. A runtime that verifies in
one batched forward whatever this harness computed (`profile.batched_verify`: ds4) is priced
batched: each part once over T positions, the union's experts read from memory once.

Roofline: a part takes max(bytes / mem_gbps, FLOPs / peak), not the sum: a matmul kernel
streams its weights while the ALUs work on what has arrived, so the slower of the two bounds it
(at γ ≤ 8 every part here is bandwidth-bound on a Mac: 2γ FLOPs per 0.56 weight bytes stays below
the M4's ridge of ~40 FLOP/byte, so max vs sum changes little; sum would charge both in full).
Tests: `pytest tests/clock/test_clock_model.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specdec.clock.profiles import DeviceProfile
from specdec.clock.shapes import Cost, ModelShape


class ReadStep(NamedTuple):
    """One cache step's reads (a `LayerStep`'s fields the clock needs). A typed tuple, not a
    frozen dataclass: `--gamma auto` prices passes not yet run with a step per MoE layer, 62 a
    forward and several forwards a pass, where a frozen dataclass's __init__ costs 3x a
    tuple's."""

    layer: int
    misses: int
    bytes_read: int
    prefetched: int = 0  # > 0: a lookahead batch for `layer`, issued by the layer before it
    synced: bool = True  # False: the layer ran on device slot tables, no router sync (all hit)


@dataclass(frozen=True)
class Forward:
    positions: int  # T: tokens this call appends
    context: int  # tokens already in the KV cache
    layers: tuple[int, ...]  # decoder layers run, in order
    unions: dict[int, int]  # MoE layer -> distinct experts selected (0: layer not routed)
    steps: tuple[ReadStep, ...] = ()  # the call's reads, in the order they were issued
    head: bool = True
    # computed position by position, each as a one-token call (a decode-form verify forward)
    positionwise: bool = False


@dataclass
class ModeledTime:
    compute_s: float = 0.0  # roofline time of every part (bandwidth- or FLOP-bound)
    sync_s: float = 0.0  # fixed per MoE layer: router syncs, further positions, miss calls
    read_s: float = 0.0  # time the device waits on reads (what compute does not hide)
    bytes_read: float = 0.0
    reads: int = 0

    @property
    def total_s(self) -> float:
        return self.compute_s + self.sync_s + self.read_s

    def add(self, other: ModeledTime) -> None:
        self.compute_s += other.compute_s
        self.sync_s += other.sync_s
        self.read_s += other.read_s
        self.bytes_read += other.bytes_read
        self.reads += other.reads


def roof(profile: DeviceProfile, c: Cost):
    """Roofline seconds of one part: the slower of its bytes and its FLOPs (an array of them
    where `c.bytes` is one: a part per element)."""
    memory = c.bytes / (profile.mem_gbps * 1e9)
    compute = c.flops / (profile.peak_tflops * 1e12)
    return np.maximum(memory, compute) if isinstance(memory, np.ndarray) else max(memory, compute)


def _reads_by_layer(steps: tuple[ReadStep, ...]) -> tuple[dict, dict]:
    """Per layer [demand blocks, bytes, whether its router syncs] summed over its steps in the
    order issued, and per issuing layer its prefetches [ReadStep]."""
    demand: dict[int, list] = {}
    issued: dict[int, list[ReadStep]] = {}
    last = None
    for s in steps:
        if s.prefetched:
            issued.setdefault(last, []).append(s)
            continue
        last = s.layer
        own = demand.get(last)
        if own is None:
            demand[last] = [s.misses, s.bytes_read, s.synced]
        else:
            own[0] += s.misses
            own[1] += s.bytes_read
            own[2] = own[2] or s.synced
    return demand, issued


def _batch(profile: DeviceProfile, n: int, nbytes: float) -> float:
    return profile.read_time(n, nbytes / n) if n else 0.0


_NO_READS = (0, 0, True)  # a layer without steps: no reads, and its router syncs


@dataclass(frozen=True)
class Compute:
    """What a forward computes, whatever it reads (`compute_parts`): its layers' parts."""

    each: bool  # position by position (the decode form), each position its own calls
    attention: float  # every layer's attention, alike
    further: float  # per MoE layer: the further positions' calls
    unions: list  # [layers] each layer's union (0: not routed)
    mlps: list[float]  # [layers] each layer's MLP


def compute_parts(profile: DeviceProfile, shape: ModelShape, fwd: Forward) -> Compute:
    """`fwd`'s Compute on `profile`: what `forward_time` adds its reads to. Priced once for
    forwards alike but for their reads (`--gamma auto`'s expected pass, two whole read counts)."""
    T = fwd.positions
    each = fwd.positionwise and T > 1 and not profile.batched_verify
    further = profile.position_s * (T - 1) if each else 0.0
    unions = [fwd.unions.get(layer, 0) for layer in fwd.layers]
    mlps = _mlps(profile, shape, fwd.layers, unions, T, each)
    return Compute(each, _attention(profile, shape, T, fwd.context, each), further, unions, mlps)


def forward_time(
    profile: DeviceProfile, shape: ModelShape, fwd: Forward, parts: Compute | None = None
) -> ModeledTime:
    """Modeled seconds of one forward on `profile` (see the module docstring for the timeline);
    `parts`: its `compute_parts`, where already priced."""
    # ModeledTime's fields, in locals: the loop below runs once per layer, 62 a forward and
    # several forwards a pass where `--gamma auto` prices its candidates
    compute_s = sync_s = read_s = bytes_read = 0.0
    reads = 0
    t = disk = 0.0  # device clock; when the disk is next free
    ready: dict[int, float] = {}  # layer -> when its prefetched blocks have landed
    prefetched_for: dict[int, tuple[int, float]] = {}  # layer -> (blocks, bytes) prefetched
    demand, issued = _reads_by_layer(fwd.steps)
    parts = parts or compute_parts(profile, shape, fwd)
    T, each, attention, further = fwd.positions, parts.each, parts.attention, parts.further
    router_s, miss_call_s = profile.router_sync_s, profile.miss_call_s
    overlap, moe = profile.overlap_reads, shape.moe_layers
    # a read batch's time depends on its blocks and bytes, a landing's likewise: each priced
    # once per forward (its layers mostly share them)
    batches: dict[tuple[int, float], float] = {}
    landings: dict[tuple[float, int], float] = {}
    for layer, union, mlp in zip(fwd.layers, parts.unions, parts.mlps, strict=True):
        t += attention
        compute_s += attention
        compute_s += mlp
        if layer not in moe:
            t += mlp
            continue
        misses, nbytes, synced = demand.get(layer, _NO_READS)
        if synced:  # a wholly resident layer skips the sync
            t += router_s
            sync_s += router_s
        t += further
        sync_s += further
        done = t
        if misses:  # issued after the call's host path of a miss (`miss_call_s`)
            t += miss_call_s
            sync_s += miss_call_s
            batch = batches.get((misses, nbytes))
            if batch is None:
                batch = batches[misses, nbytes] = _batch(profile, misses, nbytes)
            done = max(t, disk) + batch
            disk = done
        ahead_blocks = ahead_bytes = blocks = 0
        early = 0.0
        if issued:  # a forward with lookahead reads (none: nothing prefetched, nothing ready)
            if layer in ready:
                done = max(done, ready.pop(layer))
            for p in issued.get(layer, ()):  # they start once this layer's reads have landed
                disk = max(done, disk) + _batch(profile, p.prefetched, p.bytes_read)
                ready[p.layer] = max(ready.get(p.layer, 0.0), disk)
                before, nb = prefetched_for.get(p.layer, (0, 0.0))
                prefetched_for[p.layer] = (before + p.prefetched, nb + p.bytes_read)
                ahead_blocks += p.prefetched
                ahead_bytes += p.bytes_read
            blocks, early = prefetched_for.pop(layer, (0, 0.0))
        bytes_read += nbytes + ahead_bytes
        reads += misses + ahead_blocks
        hidden = mlp * (union - misses) / union if overlap and union else 0.0
        stall = max(0.0, done - t - hidden)  # reads still landing once the overlap is spent
        # the blocks just read (and those prefetched for this layer) reach the accelerator first
        key = (nbytes + early, misses + blocks)
        land = landings.get(key)
        if land is None:
            land = landings[key] = profile.land_time(*key)
        read_s += stall + land
        t += stall + land + mlp
    if fwd.head:
        part = shape.head_cost(1 if each else T)
        compute_s += (T if each else 1) * roof(profile, part)
    return ModeledTime(compute_s, sync_s, read_s, bytes_read, reads)


def _attention(profile: DeviceProfile, shape: ModelShape, T: int, context: int, each: bool):
    """One layer's attention over T new positions: one batched call, or (`each`, the decode
    form) T one-position calls, each reading the weights again over a context one longer."""
    if not each:
        return roof(profile, shape.attention_cost(T, context))
    return sum(roof(profile, shape.attention_cost(1, context + i)) for i in range(T))


def _mlps(
    profile: DeviceProfile, shape: ModelShape, layers: tuple, unions: list, T: int, each: bool
) -> list[float]:
    """[len(layers)] each layer's MLP over T positions, `unions` its routed experts: batched
    over the union (each read from memory once), or (`each`) T one-position calls, each reading
    the dense or shared weights and the router again and its own top-k experts (the union is
    what the disk reads, not what each call computes on). A layer's depends on its kind and
    union only: the MoE layers' are priced in one array operation (`--gamma auto`'s expected
    unions are means, mostly distinct), a dense layer's once."""
    positions = 1 if each else T
    union = np.asarray(unions, np.float64)  # [len(layers)]
    moe = roof(
        profile, shape.moe_mlp_cost(positions, np.minimum(shape.top_k, union) if each else union)
    )
    dense = roof(profile, shape.dense_mlp_cost(positions))
    if each:
        moe, dense = T * moe, T * dense
    routed = shape.moe_layers
    return [m if layer in routed else dense for layer, m in zip(layers, moe.tolist(), strict=True)]


def reads_time(profile: DeviceProfile, steps: tuple[ReadStep, ...]) -> ModeledTime:
    """Reads issued together with no compute to hide behind (`--gamma auto`'s re-sync before a
    pass, specdec.gamma.chooser): one batch, then their landing on the accelerator."""
    n, nbytes = sum(s.misses for s in steps), float(sum(s.bytes_read for s in steps))
    if not n:
        return ModeledTime()
    seconds = _batch(profile, n, nbytes) + profile.land_time(nbytes, n)
    return ModeledTime(read_s=seconds, bytes_read=nbytes, reads=n)


def measured_time(
    profile: DeviceProfile, compute_s: float, steps: tuple[ReadStep, ...]
) -> ModeledTime:
    """`compute = "measured"` profiles: this machine's compute plus every batch's modeled reads,
    none overlapped (reads of a layer block this harness)."""
    out = ModeledTime(compute_s=compute_s)
    for s in steps:
        n = s.prefetched or s.misses
        out.read_s += _batch(profile, n, s.bytes_read)
        out.bytes_read += s.bytes_read
        out.reads += n
    return out
