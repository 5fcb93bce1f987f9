"""Test helpers: tiny random checkpoints of every family, built once per session."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_load
from mlx_lm.generate import generate_step

from specdec.checkpoint.random_models import make_random
from specdec.core.blas import active_blas
from specdec.stream.loader import load

# other machines' home directories, for the tests of results that must name none (a lent
# machine's user, a CI user), joined from parts so that no source file names a machine's path
LENT_HOME = str(Path("/", "home", "lent"))
CI_HOME = str(Path("/", "home", "ci-user"))

FAMILIES = ["deepseek_v3", "qwen3_moe", "qwen2_moe", "mixtral", "minimax"]


def fast_cases(cases: list, *keep) -> list:
    """`cases` for `pytest.mark.parametrize` with every case but those in `keep` (default: the
    first) marked slow: the fast loop (`pytest -m "not slow"`) runs the kept ones, a plain
    `pytest` all of them. Test ids stay as they were. A tuple is one case of several arguments."""
    keep = keep or (cases[0],)
    return [
        c
        if c in keep
        else pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=pytest.mark.slow)
        for c in cases
    ]


def random_checkpoint(root: Path, family: str, bits: int | None) -> Path:
    out = root / f"{family}-{bits or 'f32'}"
    if not (out / "config.json").exists():
        make_random(family, out, bits=bits, seed=0)
    return out


# A prompt long enough to cross several experts' reads on the tiny checkpoints.
CODE_PROMPT = "import os\nimport sys\n\ndef main(argv):\n    "


def mlx_lm_greedy(model, prompt: list[int], n: int, **kw) -> list[int]:
    """mlx-lm's own greedy decode of `prompt` on the resident `model`: its `n` tokens, the
    reference of every lossless test (`kw`: generate_step's, e.g. prefill_step_size)."""
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n, **kw)]


def streamed_target(root: Path, family: str, bits: int | None, n_tokens: int) -> Iterator[tuple]:
    """A module fixture's body: (streamed model, checkpoint, mlx-lm model, prompt, plain greedy).

    The streamed model gets a 30% budget (reads on every step) and buffered reads; its plan cache
    goes under `root` for the fixture's life.
    """
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECDEC_CACHE", str(root / "cache"))
    src = random_checkpoint(root, family, bits)
    ref_model, tok = mlx_load(str(src))
    prompt = tok.encode(CODE_PROMPT)
    ref = mlx_lm_greedy(ref_model, prompt, n_tokens)
    sm = load(src, budget="30%", io="buffered")
    yield sm, src, ref_model, prompt, ref
    sm.close()
    mp.undo()


# The exactness contract (docs/blas.md, "The exactness contract"). Streamed == resident bit for bit wherever the
# expert matmuls do not go through a CPU-tuned BLAS: quantized experts (MLX's own gather_qmm
# kernels) and float experts under MLX's reference BLAS. OpenBLAS picks its float kernels per CPU
# (AVX2, AVX-512, NEON) and some of them sum a row in another order when the arena's slot ids
# group a gather's rows differently from the resident expert ids (seen: 2.0e-06 with the AVX-512
# kernel), so there logits agree within LOGIT_ATOL and greedy tokens are identical up to a
# near-tie: they may part only where the reference's two candidates are within 2 * LOGIT_ATOL
# (seen on an Intel Xeon: a random f32 mixtral parted at token 24 of 40 on such a tie).
LOGIT_ATOL = 1e-4


def bit_exact_expected(bits: int | None, blas: str | None = None) -> bool:
    """Whether the contract promises bit-equal logits for these weights under `blas`."""
    return bits is not None or (blas or active_blas()) == "reference"


def assert_logits_match(worst: float, bits: int | None, what: str, blas: str | None = None):
    """Assert the exactness contract on the largest |streamed - resident| logit difference."""
    if bit_exact_expected(bits, blas):
        assert worst == 0.0, f"{what}: streamed != resident bit for bit, max diff {worst}"
    else:
        assert worst <= LOGIT_ATOL, f"{what}: max logit diff {worst} > {LOGIT_ATOL}"


def assert_greedy_match(got: list[int], ref: list[int], ref_logits, bits, what: str, blas=None):
    """Greedy tokens under the contract; `ref_logits[i]` scores position i's candidates."""
    if bit_exact_expected(bits, blas) or got == ref:
        assert got == ref, f"{what}: greedy tokens differ"
        return
    assert len(got) == len(ref), f"{what}: {len(got)} greedy tokens, reference {len(ref)}"
    i = next(i for i, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b)
    margin = float(ref_logits[i][ref[i]] - ref_logits[i][got[i]])
    assert margin <= 2 * LOGIT_ATOL, f"{what}: greedy parted at {i} with margin {margin}"


def resident_logits(model, tokens: list[int], cache) -> np.ndarray:
    return np.array(model(mx.array([tokens]), cache=cache)[0].astype(mx.float32))


# γ per pass for `--gamma auto` made to run plain passes between drafting ones (a plain pass
# drafts nothing: a drafter with state must still follow its committed tokens)
PLAIN_BETWEEN = [1, 1, 3, 1, 2, 1, 1, 1, 4]


def force_gamma_schedule(monkeypatch: pytest.MonkeyPatch, gammas: list[int]) -> None:
    """AutoGamma.choose returns `gammas` in turn (repeated), capped at the tokens left."""
    from specdec.gamma.chooser import Choice
    from specdec.gamma.controller import AutoGamma

    it = iter(gammas * 64)
    monkeypatch.setattr(
        AutoGamma, "choose", lambda self, context, left: Choice(min(next(it), left), "best")
    )


class HostCopyStandIn:
    """A mock of specdec.store.cuda_copy.CudaCopy, named as one: the copy engine cannot run on a
    CPU, so `--io pinned`'s reader path (always staged, staging pinned before use, replaced
    buffers unpinned, everything unpinned at close) runs here with host copies in its place.
    `pinned` holds the addresses pinned now; `landed` counts the bytes copied."""

    def __init__(self) -> None:
        self.pinned: dict[int, int] = {}
        self.landed, self.closed = 0, False

    def pin(self, buf: np.ndarray) -> None:
        assert buf.ctypes.data not in self.pinned, "pinned twice"
        self.pinned[buf.ctypes.data] = buf.nbytes

    def unpin(self, buf: np.ndarray) -> None:
        self.pinned.pop(buf.ctypes.data, None)

    def land(self, src: np.ndarray, pieces: list[np.ndarray]) -> None:
        assert any(a <= src.ctypes.data < a + n for a, n in self.pinned.items()), "not pinned"
        at = 0
        for piece in pieces:
            piece[:] = src[at : at + len(piece)]
            at += len(piece)
        self.landed += at

    def close(self) -> None:
        self.pinned.clear()
        self.closed = True


def pinned_stand_in(monkeypatch: pytest.MonkeyPatch) -> list[HostCopyStandIn]:
    """Readers opened with io="pinned" get a HostCopyStandIn (where the CUDA backend is absent);
    returns the list each new one is appended to."""
    from specdec.core.accelerator import on_cuda
    from specdec.store import reader

    made: list[HostCopyStandIn] = []

    def stand_in() -> HostCopyStandIn:
        made.append(HostCopyStandIn())
        return made[-1]

    if not on_cuda():
        monkeypatch.setattr(reader, "_pinned_copy", stand_in)
    return made


def load_module(path: Path):
    """Import a module file from outside the package (a benchmark script, a probe file)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
