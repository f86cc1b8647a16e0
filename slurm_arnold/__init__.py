"""slurm-arnold: topology-aware placement, reservation and scheduling of LLM jobs on Slurm."""

__version__ = "0.1.0"
