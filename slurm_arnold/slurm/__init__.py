"""The Slurm adapter: the only package of slurm-arnold that runs Slurm commands.

One module per Slurm document, its version-specific parsing beside it (``nodes``, ``jobs``,
``reservations``, ``accounting``, ``partitions``, ``submit``; what they share in ``common``),
one runner of commands (``runner``), the seam a backend plugs into (``backend``: today
``commands``), and the object callers use (``adapter.Slurm``).

Where this Slurm's ``--json`` schema is one we have a parser for we use it: OpenAPI v0.0.38
(Slurm 22.05: ``sinfo``/``squeue``/``sacct --json``) and data_parser v0.0.42 to v0.0.45 (Slurm
24.11 to 26.05: ``scontrol show nodes``/``squeue``/``sacct --json``, numbers wrapped as
``{set, infinite, number}`` and states as lists). Slurm's version is read once per adapter and
picks the parser; any other schema (23.02 to 24.05, or one newer than we know) falls back to the
stable text forms (``scontrol show ... --oneliner``, ``squeue``/``sacct`` with explicit
``--format`` and ``--parsable2``), which every version also gets in the tests. Reservations and
topology are always read as text.
"""

from slurm_arnold.slurm.accounting import AccountingRecord
from slurm_arnold.slurm.adapter import Slurm
from slurm_arnold.slurm.backend import SlurmBackend
from slurm_arnold.slurm.common import parse_gpu_count, parse_oneliner, parse_time_limit
from slurm_arnold.slurm.jobs import UNFINISHED, JobInfo
from slurm_arnold.slurm.nodes import UNAVAILABLE_FLAGS, NodeInfo
from slurm_arnold.slurm.reservations import Reservation
from slurm_arnold.slurm.runner import JSON_V0038, JSON_V004X, json_family, slurm_commands_dir
from slurm_arnold.slurm.submit import parse_test_only

__all__ = [
           "JSON_V0038",
           "JSON_V004X",
           "UNAVAILABLE_FLAGS",
           "UNFINISHED",
           "AccountingRecord",
           "JobInfo",
           "NodeInfo",
           "Reservation",
           "Slurm",
           "SlurmBackend",
           "json_family",
           "parse_gpu_count",
           "parse_oneliner",
           "parse_test_only",
           "parse_time_limit",
           "slurm_commands_dir",
]
