"""The shared job logs the simulator bench replays, and how (kept apart from
``benchmarks.sim`` so that the CLI can name them without importing the simulator)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogSetup:
    """How one shared log is replayed: the fat tree (minipods x leaves x nodes), GPUs per
    processor, and how many of its jobs (``None``: all)."""

    name: str
    file: str
    pods: int
    leaves: int
    nodes: int
    gpus_per_proc: float
    jobs: int | None = None


#: Curie's 5,120-node replays cost minutes each (the placement engine on a big tree): its
#: first 10,000 jobs. HPC2N's 202,871 jobs: its first 100,000 (the replay-speed target).
CURIE_JOBS = 10_000
HPC2N_JOBS = 100_000
LOGS = (LogSetup("KTH", "KTH-SP2-1996-2.swf.gz", 4, 4, 7, 8.0),
        LogSetup("Curie", "CEA-Curie-2011-window.swf.gz", 10, 16, 32, 0.5, CURIE_JOBS),
        LogSetup("HPC2N", "HPC2N-2002-2.2-cln.swf.gz", 4, 4, 8, 4.0, HPC2N_JOBS),
        LogSetup("SDSC-SP2", "SDSC-SP2-1998-4.2-cln.swf.gz", 4, 4, 8, 8.0))
LOG_NAMES = tuple(setup.name for setup in LOGS)
#: The replay at a site's size (``arnold bench sim --site-scale``): HPC2N's first 100,000 jobs
#: with each processor taken as 8 GPUs, on 1,024 nodes of 8 GPUs (8 minipods x 8 leaves x 16).
HPC2N_1024 = LogSetup("HPC2N-1024", "HPC2N-2002-2.2-cln.swf.gz", 8, 8, 16, 8.0, HPC2N_JOBS)
