"""Arnold's placement: a job's DP x PP matrix on the fat tree (MIP and the paper's baselines)."""

from slurm_arnold.placement.engine import OFFLINE_ALGOS, place
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Metrics, Placement, measure

__all__ = ["OFFLINE_ALGOS", "JobShape", "Metrics", "Placement", "measure", "place"]
