"""Shared pytest setup. The fast BLAS is set up by the plugin specdec.core.pytest_blas, which the
package installs as a pytest entry point (pyproject.toml), before pytest captures any output.
Results never depend on the BLAS (tests/core/test_blas.py repeats an exactness check without it).
"""
