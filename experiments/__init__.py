"""Experiment entry points: Hydra composition, sweeps, run directories and wandb (`specdec-exp`).

The library (`specdec/`) never imports Hydra or wandb; everything here turns a composed config
into plain library calls. `python -m experiments.run --help` lists the config groups.
"""
