"""peak_rss_bytes reads the process's high-water mark, pages touched by any thread included
(on Linux it asks for the calling thread's usage, whose ru_maxrss is the address space's).

Run: `pytest tests/store/test_peak_rss.py`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# a fresh process: its resident set now (/proc), then 256 MiB written by a worker thread
CHILD = """
import os
import threading
import numpy as np
from specdec.store.budget import peak_rss_bytes

with open("/proc/self/statm") as f:
    now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
worker = threading.Thread(target=lambda: np.ones(256 << 20, np.uint8).sum())
worker.start()
worker.join()
print(now, peak_rss_bytes())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD is Linux's")
def test_peak_rss_counts_pages_another_thread_touched():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    now, peak = map(int, out.stdout.split())
    assert peak - now >= 240 << 20  # the worker's 256 MiB on top of what was resident
