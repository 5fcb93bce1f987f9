"""Progress bars for long work: one tqdm bar on stderr, off where nobody watches.

    for prompt in progress(prompts, desc="trace record", unit="prompt"):
        ...
    with progress(total=n_rows, desc="simulate", unit="run") as bar:
        bar.update()

Off when stderr is not a terminal (logs, CI, pipes: no carriage-return noise), and with
`--quiet` on any `specdec` command or SPECDEC_QUIET=1 in the environment (the flag sets the
variable, so the processes a command starts are quiet too). stdout is never touched: the
commands' results stay machine-readable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from tqdm import tqdm

QUIET_ENV = "SPECDEC_QUIET"


def quiet() -> bool:
    """Whether bars are off: SPECDEC_QUIET set (to anything but 0 or empty), or no terminal."""
    return os.environ.get(QUIET_ENV, "") not in ("", "0") or not sys.stderr.isatty()


def progress(
    iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"
) -> tqdm:
    """A tqdm bar over `iterable` (or of `total` steps, updated by hand) on stderr; a no-op bar
    when quiet()."""
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
        disable=quiet(),
    )
