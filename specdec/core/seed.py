"""Random seeds from the command line, checked once at the edge: `check_seed(args.seed)`.

numpy's generators take any whole number >= 0, numpy's legacy seeding and mlx's keys 0..2^32-1;
every command takes the range all of them accept, so a seed means the same everywhere.
"""

from __future__ import annotations

from specdec.core.errors import SpecdecError

MAX_SEED = 2**32 - 1


def check_seed(seed: int, flag: str = "seed") -> int:
    """`seed` if it is in 0..2^32-1, else a one-line SpecdecError naming `flag`."""
    if seed < 0:
        raise SpecdecError(f"{flag} must be >= 0 (got {seed})")
    if seed > MAX_SEED:
        raise SpecdecError(f"{flag} must be at most 2^32-1 = {MAX_SEED} (got {seed})")
    return seed
