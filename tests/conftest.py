"""Shared fixtures. Importing this re-executes pytest once with the fast BLAS (specdec.blas)."""

from specdec.blas import ensure_fast_blas

ensure_fast_blas()
