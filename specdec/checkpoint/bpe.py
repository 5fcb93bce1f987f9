"""Byte-level BPE tokenizers trained locally with `tokenizers` (no hub): GPT-2 style, no prefix
space, one special end-of-text token. Used by `make-random` and by the tiny model's corpus."""

from __future__ import annotations

from collections.abc import Iterable


def train_byte_bpe(texts: Iterable[str], vocab_size: int, special: str):
    """A `tokenizers.Tokenizer` trained on `texts`, with `special` as its only special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok
