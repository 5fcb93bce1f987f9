"""Every test under tests/e2e/ is slow: each runs whole commands or whole experiments (Hydra
sweeps, killed and resumed runs, concurrent processes, injected faults, the CLI fuzzer).
`pytest -m "not slow"` leaves them out; a plain `pytest` runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # a conftest's hook sees every collected item, not only its folder's: keep to this folder
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
