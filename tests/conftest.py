"""Shared pytest setup: re-execute pytest once with the fast BLAS preloaded (specdec.core.blas).

The re-exec happens in pytest_configure, after pytest has redirected stdout/stderr into its
capture files, so global capturing is stopped first: the new process inherits the terminal.
Results never depend on the BLAS (tests/test_blas.py repeats an exactness check without it).
"""

from specdec.core.blas import ensure_fast_blas, find_fast_blas


def pytest_configure(config):
    if find_fast_blas() is None:
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.stop_global_capturing()
    ensure_fast_blas()
    if capman is not None:  # no re-exec happened (already preloaded): capture again
        capman.start_global_capturing()
