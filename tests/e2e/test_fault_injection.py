"""Reader faults never reach compute: a slot whose read failed is never used.

Run: `pytest tests/e2e/test_fault_injection.py`. The reader's test-only `fault_hook` injects EIO
(transient: fails a few attempts then succeeds; persistent: fails every attempt), short reads and
slow reads into a real streamed model (qwen3_moe, 4-bit, a 6-slot cache so steps miss, evict and
chunk), with router lookahead off and on (lookahead reads fail too; they are then forgotten and
read again on demand). Hypothesis draws a sequence of forward calls, each with its own faulty blocks; after
every call, successful or not, every key the cache holds must sit in a slot whose bytes match its
block's crc32, and every call that returns must give exactly the resident model's logits.
Persistent faults must raise a StoreError naming the layer, the expert and the file (also
through `specdec generate`), and a corrupt block read ahead with --verify-checksums is forgotten
and then named. A re-sync (`--gamma auto` taking plain's cache) whose read fails forgets that
block; cleared, it lands every block and the logits stay exact.
"""

from __future__ import annotations

import errno
import os
import re
import time

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm import load as mlx_load

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.core.errors import StoreError
from specdec.store.reader import MAX_RETRIES
from specdec.stream.loader import load
from tests.helpers import random_checkpoint

FAULTS = ("transient", "persistent", "short", "slow")


class Faults:
    """The fault hook: `plan` maps (layer, expert) -> fault kind for the current call."""

    def __init__(self) -> None:
        self.plan: dict[tuple[int, int], tuple[str, int]] = {}
        self.injected: dict[str, int] = dict.fromkeys(FAULTS, 0)

    def __call__(self, layer: int, expert: int, attempt: int) -> int | None:
        kind, n = self.plan.get((layer, expert), ("", 0))
        if kind == "persistent" or (kind == "transient" and attempt < n):
            self.injected[kind] += 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        if kind == "short":
            self.injected[kind] += 1
            return 4096 * n + 1  # one short piece per attempt; the reader loops to complete it
        if kind == "slow":
            self.injected[kind] += 1
            time.sleep(0.002 * n)  # reads of one batch land out of order
        return None


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    os.environ.setdefault("SPECDEC_CACHE", str(root / "cache"))
    src = random_checkpoint(root, "qwen3_moe", 4)
    return src, mlx_load(str(src))[0]


def _streamed(ckpt, lookahead):
    src, ref_model = ckpt
    sm = load(
        src, budget="6slots", policy="lru", io="buffered", with_mtp=False, lookahead=lookahead
    )
    faults = Faults()
    sm.streamer.reader.fault_hook = faults
    yield sm, ref_model, faults
    sm.close()


@pytest.fixture(scope="module", params=[0, 1], ids=["no-lookahead", "lookahead-1"])
def streamed(ckpt, request):
    yield from _streamed(ckpt, request.param)


@pytest.fixture(scope="module")
def streamed_lookahead(ckpt):
    yield from _streamed(ckpt, 1)


def assert_slots_hold_their_blocks(sm) -> None:
    """Every resident key's slot holds exactly its block (crc32 against the index)."""
    s = sm.streamer
    s.source.settle_all()  # lookahead reads still landing (what a hit would wait for)
    for key in s.cache.resident_keys():
        layer, expert = divmod(key, s.key_stride)
        layout = s.index.layers[layer]
        slot = s.cache.slot_of(key)
        crc = s.arena.crc32(slot, layout.block_bytes)
        assert crc == int(layout.crc32[expert]), (
            f"layer {layer} expert {expert} is resident in slot {slot} but the slot does not hold "
            "its block: a failed read left it in the cache"
        )


def logits(model, tokens: list[int]) -> np.ndarray:
    return np.array(model(mx.array([tokens]))[0].astype(mx.float32))  # [T, V]


block_ids = st.tuples(st.sampled_from([0, 1, 2]), st.integers(0, 15))
fault_plans = st.dictionaries(
    block_ids, st.tuples(st.sampled_from(FAULTS), st.integers(1, MAX_RETRIES)), max_size=12
)
calls = st.lists(
    st.tuples(st.lists(st.integers(0, 511), min_size=1, max_size=6), fault_plans),
    min_size=2,
    max_size=6,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls)
def test_failed_reads_never_reach_compute(streamed, calls):
    sm, ref_model, faults = streamed
    sm.reset_cache()
    for tokens, plan in calls:
        faults.plan = plan
        try:
            got = logits(sm.model, tokens)
        except StoreError as e:
            bad = [le for le, (kind, _) in plan.items() if kind == "persistent"]
            m = re.search(
                r"experts\.bin: reading layer (\d+) expert (\d+) .* after (\d+) attempt", str(e)
            )
            assert m, str(e)
            assert (int(m[1]), int(m[2])) in bad and int(m[3]) == MAX_RETRIES + 1, str(e)
        else:
            ref = logits(ref_model, tokens)
            assert np.array_equal(got, ref), "a call that succeeded computed on a bad slot"
        finally:
            faults.plan = {}
        assert_slots_hold_their_blocks(sm)
    # after the faults clear, the same calls all succeed and are exact
    for tokens, _ in calls:
        assert np.array_equal(logits(sm.model, tokens), logits(ref_model, tokens))
    assert_slots_hold_their_blocks(sm)


def test_failed_lookahead_read_is_forgotten_then_read_on_demand(streamed_lookahead):
    sm, ref_model, faults = streamed_lookahead
    sm.reset_cache()
    s = sm.streamer
    before = s.source.prefetch_failures
    tokens = [5]  # one position: its top-4 leaves room in 6 slots for lookahead reads
    faults.plan = {(2, e): ("persistent", 1) for e in range(16)}
    try:
        with pytest.raises(StoreError, match=r"layer 2 expert \d+ .* after 4 attempt"):
            logits(sm.model, tokens)
    finally:
        faults.plan = {}
    assert s.source.prefetch_failures > before, (
        "layer 1's lookahead reads of layer 2 should have failed"
    )
    assert not [k for k in s.cache.resident_keys() if k // s.key_stride == 2]
    assert_slots_hold_their_blocks(sm)
    # transient faults on the lookahead reads: retried, nothing forgotten, exact logits
    faults.plan = {(2, e): ("transient", MAX_RETRIES) for e in range(16)}
    try:
        assert np.array_equal(logits(sm.model, tokens), logits(ref_model, tokens))
    finally:
        faults.plan = {}
    assert faults.injected["transient"] > 0 and faults.injected["persistent"] > 0


@pytest.fixture(scope="module")
def streamed_plain(ckpt):
    yield from _streamed(ckpt, 0)


def test_a_resync_lands_real_blocks_and_forgets_one_whose_read_failed(streamed_plain):
    # `--gamma auto`'s re-sync (Streamer.adopt): the cache takes another cache's keys and order,
    # reading the blocks it lacks into real slots. A persistent fault on one of them raises,
    # and its key is forgotten (never a hit on a partial block); cleared, the re-sync lands
    # every block and the model computes exactly the resident logits on them
    sm, ref_model, faults = streamed_plain  # no lookahead: a re-sync needs every key in the policy
    sm.reset_cache()
    s = sm.streamer
    tokens = [7, 300, 41]
    logits(sm.model, tokens)  # the 6 slots filled by the model's own routing
    shadow = ExpertCache(6, make_policy("lru", 6))
    want = [2 * s.key_stride + e for e in (1, 3, 5, 8, 13, 15)]  # other blocks, one layer
    shadow.preload(want)
    lacking = [k for k in want if s.cache.slot_of(k) is None]
    assert lacking, "the shadow must hold blocks the cache lacks"
    faults.plan = {divmod(lacking[0], s.key_stride): ("persistent", 1)}
    try:
        with pytest.raises(StoreError, match=r"layer 2 expert \d+ .* after 4 attempt"):
            s.adopt(shadow)
    finally:
        faults.plan = {}
    assert s.cache.slot_of(lacking[0]) is None
    assert_slots_hold_their_blocks(sm)
    s.adopt(shadow)
    assert s.cache.held_order() == want
    assert_slots_hold_their_blocks(sm)
    assert np.array_equal(logits(sm.model, tokens), logits(ref_model, tokens))


def test_persistent_fault_through_the_cli(ckpt, tmp_path, monkeypatch, capsys):
    """`specdec generate` on a disk that fails one block: exit 2, one line naming the block."""
    from specdec.cli import main
    from specdec.store.reader import ExpertReader

    src, _ = ckpt
    init = ExpertReader.__init__

    def failing_disk(self, *args, **kw):
        init(self, *args, **kw)
        self.fault_hook = Faults()
        self.fault_hook.plan = {(layer, e): ("persistent", 1) for layer in range(3) for e in (3, 9)}

    monkeypatch.setattr(ExpertReader, "__init__", failing_disk)
    argv = ["generate", "--model", str(src), "--max-tokens", "8", "--io", "buffered"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert re.fullmatch(
        r"specdec: error: \S+/experts\.bin: reading layer \d expert (3|9) at offset \d+ failed "
        r"after 4 attempt\(s\): Input/output error \(injected\); run `specdec verify`",
        err[0],
    ), err[0]


def test_corrupt_block_caught_on_a_lookahead_read(ckpt, tmp_path):
    """--verify-checksums covers lookahead reads: the bad block is forgotten, then named."""
    from specdec.pack.pack import pack
    from specdec.store.layout import EXPERTS_BIN, ExpertIndex

    src, ref_model = ckpt
    packed = pack(src, tmp_path / "packed")
    index = ExpertIndex.load(packed)
    with open(packed / EXPERTS_BIN, "r+b") as f:  # flip a byte in every block of layer 2
        for off in index.layers[2].offsets:
            f.seek(int(off) + 64)
            b = f.read(1)
            f.seek(int(off) + 64)
            f.write(bytes([b[0] ^ 0xFF]))
    sm = load(packed, budget="6slots", io="buffered", lookahead=1, verify_checksums=True)
    try:
        with pytest.raises(StoreError, match=r"layer 2 expert \d+ fails its crc32 check"):
            logits(sm.model, [5])
        assert sm.streamer.source.prefetch_failures > 0, "layer 1 should have read layer 2 ahead"
        assert_slots_hold_their_blocks(sm)
    finally:
        sm.close()


MMAP_SHRINK = """
import os, sys
from specdec.core.errors import StoreError
from specdec.store.arena import Arena
from specdec.store.layout import EXPERTS_BIN, ExpertIndex
from specdec.store.reader import ExpertReader

packed = sys.argv[1]
index = ExpertIndex.load(packed)
lid = index.layer_ids[-1]
with ExpertReader(packed, index, Arena(2, index.slot_bytes), io="mmap") as reader:
    reader.read([(lid, 0, 0)])  # mapped and readable
    os.truncate(os.path.join(packed, EXPERTS_BIN), int(index.layers[lid].offsets[-1]))
    try:
        reader.read([(lid, index.layers[lid].n_experts - 1, 1)])  # past the new end
    except StoreError as e:
        print("error:", e)
"""


def test_mmap_of_a_file_truncated_after_mapping_is_a_clear_error(ckpt, tmp_path):
    """A read past the end of a mapped file raises SIGBUS, which no handler survives: the reader
    checks the size first. Run in a child process, so a SIGBUS fails the test, not the suite."""
    import subprocess
    import sys
    from pathlib import Path

    from specdec.pack.pack import pack

    packed = pack(ckpt[0], tmp_path / "packed")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", MMAP_SHRINK, str(packed)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"child died (SIGBUS is -7): {out.returncode} {out.stderr[-500:]}"
    assert re.fullmatch(
        r"error: \S+/experts\.bin: the file shrank under the mmap \(the block of layer \d+ expert "
        r"\d+ ends past it\); re-pack with `specdec pack`\n",
        out.stdout,
    ), out.stdout


def test_mmap_of_a_truncated_file_is_refused_before_mapping(ckpt, tmp_path):
    from specdec.pack.pack import pack
    from specdec.store.arena import Arena
    from specdec.store.layout import EXPERTS_BIN, ExpertIndex
    from specdec.store.reader import ExpertReader

    packed = pack(ckpt[0], tmp_path / "packed")
    index = ExpertIndex.load(packed)
    os.truncate(packed / EXPERTS_BIN, index.file_bytes - 4096)
    with pytest.raises(StoreError, match=r"truncated file\); re-pack"):
        ExpertReader(packed, index, Arena(1, index.slot_bytes), io="mmap")
