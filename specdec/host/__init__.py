"""What a process runs on: the BLAS MLX calls (blas.py: fast BLAS on Linux, recorded with every
result) and the machine a result was measured on (machine.py)."""
