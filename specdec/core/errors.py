"""User-facing errors: one line naming the problem and the fix, no traceback.

Library code raises `SpecdecError` (or a subclass) for anything a user can cause: a missing file,
a bad budget, an unknown family. Entry points catch it, print `specdec: error: <message>` to
stderr and exit with status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SpecdecError(Exception):
    """A problem with the user's input or environment; the message says what to do."""


class StoreError(SpecdecError):
    """A packed directory, expert file or index is missing, corrupt or inconsistent."""


class BudgetError(SpecdecError):
    """A cache budget that cannot be parsed or is too small."""
