"""One short script per table or figure docs/results/ publishes, each regenerating it from run
directories (`specdec probe ... --out DIR`, `specdec-exp` sweeps) or from the question's table:

    python -m analysis.speculation SWEEP [--m5 SWEEP_M5]   # speculation over streamed experts
    python -m analysis.union_cost                           # the question's union-cost arithmetic
    python -m analysis.eviction runs/probes                 # eviction key, hit rate by budget
    python -m analysis.lookahead runs/probes                # router lookahead recall
    python -m analysis.read_path benchmarks/results/read.json   # read paths, GB/s by threads

Each prints its markdown table on stdout; the results file names the command above the table
(`python -m analysis.readme --check` compares them all).
"""
