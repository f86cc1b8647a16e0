"""Benchmarks of slurm-arnold: each writes its table to docs/benchmarks.md (``arnold bench``)."""
