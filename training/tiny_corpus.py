"""Corpus and tokenizer of the bundled `tiny` model: the running interpreter's stdlib sources.

Rule (fixed, documented in the model card):
  * files: every `*.py` under `sysconfig.get_paths()["stdlib"]`, excluding any path with a
    directory named site-packages, dist-packages, test, tests, idle_test or __pycache__
    (third-party code and the test suites, which are mostly data and asserts), and files that
    are not valid UTF-8;
  * split: a file is held out iff `zlib.crc32(relative_posix_path) % 10 == 0` (about 10%), so
    the split is by file, stable across machines and independent of file order;
  * documents are joined with `<|endoftext|>` between files.
Tokenizer: byte-level BPE (GPT-2 style pre-tokenizer, no prefix space) trained with
`tokenizers` on the training files only, vocab 4096 including the one special token.

Used by training/train_tiny.py and training/card_tiny.py; not run on its own.
"""

from __future__ import annotations

import json
import sys
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.checkpoint.bpe import train_byte_bpe

EOT = "<|endoftext|>"
VOCAB_SIZE = 4096
HELDOUT_MOD = 10
_EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


@dataclass(frozen=True)
class Corpus:
    root: Path
    train: list[Path]  # relative paths
    heldout: list[Path]

    def text(self, rel: Path) -> str:
        return (self.root / rel).read_text(encoding="utf-8")

    def describe(self) -> dict:
        return {
            "python": sys.version.split()[0],
            "stdlib_root": "<stdlib>",  # sysconfig "stdlib"; no machine path in the card
            "rule": f"*.py, excluding dirs {sorted(_EXCLUDED_DIRS)}; held out iff "
            f"crc32(relative path) % {HELDOUT_MOD} == 0",
            "train_files": len(self.train),
            "heldout_files": len(self.heldout),
            "train_bytes": sum((self.root / p).stat().st_size for p in self.train),
            "heldout_bytes": sum((self.root / p).stat().st_size for p in self.heldout),
        }


def is_heldout(rel: Path) -> bool:
    return zlib.crc32(rel.as_posix().encode()) % HELDOUT_MOD == 0


def stdlib_corpus() -> Corpus:
    root = Path(sysconfig.get_paths()["stdlib"]).resolve()
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _EXCLUDED_DIRS & set(rel.parts[:-1]):
            continue
        try:
            path.read_bytes().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        files.append(rel)
    return Corpus(
        root,
        train=[p for p in files if not is_heldout(p)],
        heldout=[p for p in files if is_heldout(p)],
    )


def train_tokenizer(corpus: Corpus, out_dir: Path):
    """Train the byte-level BPE on the training files; write tokenizer.json + config."""
    tok = train_byte_bpe((corpus.text(p) for p in corpus.train), VOCAB_SIZE, EOT)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    # What transformers' AutoTokenizer (and so mlx_lm.load) needs to open tokenizer.json.
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOT,
        "bos_token": None,
        "unk_token": None,
        "pad_token": EOT,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return tok


def encode_files(tok, corpus: Corpus, files: list[Path]) -> np.ndarray:
    """All files' tokens, each followed by the end-of-text id, as one int32 array."""
    eot = tok.token_to_id(EOT)
    encs = tok.encode_batch([corpus.text(p) for p in files])
    return np.concatenate([np.array(e.ids + [eot], dtype=np.int32) for e in encs])
