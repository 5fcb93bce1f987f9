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

import functools
from dataclasses import dataclass

from specdec.clock.profiles import DeviceProfile
from specdec.clock.shapes import Cost, ModelShape


@dataclass(frozen=True)
class ReadStep:
    """One cache step's reads (a `LayerStep`'s fields the clock needs)."""

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


def roof(profile: DeviceProfile, c: Cost) -> float:
    """Roofline seconds of one part: the slower of its bytes and its FLOPs."""
    return max(c.bytes / (profile.mem_gbps * 1e9), c.flops / (profile.peak_tflops * 1e12))


def _reads_by_layer(steps: tuple[ReadStep, ...]) -> tuple[dict, dict]:
    """Demand reads per layer [(misses, bytes)], and prefetches per issuing layer."""
    demand: dict[int, list[ReadStep]] = {}
    issued: dict[int, list[ReadStep]] = {}
    last = None
    for s in steps:
        if s.prefetched:
            issued.setdefault(last, []).append(s)
        else:
            demand.setdefault(s.layer, []).append(s)
            last = s.layer
    return demand, issued


def _batch(profile: DeviceProfile, n: int, nbytes: float) -> float:
    return profile.read_time(n, nbytes / n) if n else 0.0


def forward_time(profile: DeviceProfile, shape: ModelShape, fwd: Forward) -> ModeledTime:
    """Modeled seconds of one forward on `profile` (see the module docstring for the timeline)."""
    out = ModeledTime()
    t = disk = 0.0  # device clock; when the disk is next free
    ready: dict[int, float] = {}  # layer -> when its prefetched blocks have landed
    prefetched_for: dict[int, tuple[int, float]] = {}  # layer -> (blocks, bytes) prefetched
    demand, issued = _reads_by_layer(fwd.steps)
    T = fwd.positions
    each = fwd.positionwise and T > 1 and not profile.batched_verify
    attention = _attention(profile, shape, T, fwd.context, each)  # every layer's alike
    further = profile.position_s * (T - 1) if each else 0.0  # per MoE layer
    # a layer's MLP time depends on its kind and union only, a read batch's on its blocks and
    # bytes, a landing's likewise: each priced once per forward (its layers mostly share them;
    # `--gamma auto` prices several forwards a pass, 62 layers each)
    mlps: dict[tuple[bool, float], float] = {}
    batch = functools.cache(functools.partial(_batch, profile))
    land_time = functools.cache(profile.land_time)
    for layer in fwd.layers:
        t += attention
        out.compute_s += attention
        union = fwd.unions.get(layer, 0)
        routed = layer in shape.moe_layers
        mlp = mlps.get((routed, union))
        if mlp is None:
            mlp = mlps[routed, union] = _mlp(profile, shape, layer, T, union, each)
        out.compute_s += mlp
        if not routed:
            t += mlp
            continue
        steps = demand.get(layer, ())
        if not steps or any(s.synced for s in steps):  # a wholly resident layer skips the sync
            t += profile.router_sync_s
            out.sync_s += profile.router_sync_s
        t += further
        out.sync_s += further
        misses = sum(s.misses for s in steps)
        nbytes = sum(s.bytes_read for s in steps)
        done = t
        if misses:  # issued after the call's host path of a miss (`miss_call_s`)
            t += profile.miss_call_s
            out.sync_s += profile.miss_call_s
            done = max(t, disk) + batch(misses, nbytes)
            disk = done
        done = max(done, ready.pop(layer, 0.0))
        ahead = issued.get(layer, ())
        for p in ahead:  # lookahead reads start once this layer's have landed
            disk = max(done, disk) + batch(p.prefetched, p.bytes_read)
            ready[p.layer] = max(ready.get(p.layer, 0.0), disk)
            blocks, nb = prefetched_for.get(p.layer, (0, 0.0))
            prefetched_for[p.layer] = (blocks + p.prefetched, nb + p.bytes_read)
        out.bytes_read += nbytes + sum(p.bytes_read for p in ahead)
        out.reads += misses + sum(p.prefetched for p in ahead)
        hidden = mlp * (union - misses) / union if profile.overlap_reads and union else 0.0
        stall = max(0.0, done - t - hidden)  # reads still landing once the overlap is spent
        # the blocks just read (and those prefetched for this layer) reach the accelerator first
        blocks, early = prefetched_for.pop(layer, (0, 0.0))
        land = land_time(nbytes + early, misses + blocks)
        out.read_s += stall + land
        t += stall + land + mlp
    if fwd.head:
        part = shape.head_cost(1 if each else T)
        out.compute_s += (T if each else 1) * roof(profile, part)
    return out


def _attention(profile: DeviceProfile, shape: ModelShape, T: int, context: int, each: bool):
    """One layer's attention over T new positions: one batched call, or (`each`, the decode
    form) T one-position calls, each reading the weights again over a context one longer."""
    if not each:
        return roof(profile, shape.attention_cost(T, context))
    return sum(roof(profile, shape.attention_cost(1, context + i)) for i in range(T))


def _mlp(profile: DeviceProfile, shape: ModelShape, layer: int, T: int, union: int, each: bool):
    """One layer's MLP over T positions: batched over the `union` routed experts (each read from
    memory once), or (`each`) T one-position calls, each reading the dense or shared weights and
    the router again and its own top-k experts (the union is what the disk reads, not what each
    call computes on)."""
    if not each:
        return roof(profile, shape.mlp_cost(layer, T, union))
    own = min(shape.top_k, union)  # 0: a layer not routed
    return T * roof(profile, shape.mlp_cost(layer, 1, own))


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
