"""A pytest plugin (entry point `pytest11`, installed with the package): the fast BLAS under tests.

pytest loads entry-point plugins before it starts capturing output, so re-executing here (see
specdec.core.blas) leaves pytest's terminal output whole: progress, `-v` names and the summary.
A conftest hook would run after capturing began and the new process would inherit its files.

    .venv/bin/python -m pytest          # re-executes once with OpenBLAS preloaded where found
    SPECDEC_BLAS=reference .venv/bin/python -m pytest   # keep MLX's bundled BLAS
"""

from specdec.core.blas import ensure_fast_blas

ensure_fast_blas()
