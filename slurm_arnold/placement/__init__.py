"""Arnold's placement: a job's DP x PP matrix on the fat tree (MIP and the paper's baselines)."""

from slurm_arnold.placement.engine import OFFLINE_ALGOS, place
from slurm_arnold.placement.job import NVLINK_GROUPS, JobShape, Parallelism
from slurm_arnold.placement.plan import Metrics, Placement, measure

__all__ = ["NVLINK_GROUPS", "OFFLINE_ALGOS", "JobShape", "Metrics", "Parallelism", "Placement",
           "measure", "place"]
