"""specdec: measure speculative decoding when MoE experts stream from SSD.

    import specdec
    model, tokenizer, streamer = specdec.load("tiny", budget="64MiB", policy="lru", io="direct")

See README.md for the commands and the architecture.
"""

from specdec.core.attention import pin_attention

__version__ = "0.1.0"

# before any MLX attention runs in this process: MLX's own kernels on CUDA, which repeat bit for
# bit run to run, not cuDNN's (specdec/core/attention.py)
pin_attention()


def load(path, **kwargs):
    """Load a model with its routed experts streamed from disk (see specdec.stream.loader.load)."""
    from specdec.stream.loader import load as _load

    return _load(path, **kwargs)
