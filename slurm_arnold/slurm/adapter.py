"""The Slurm adapter the rest of slurm-arnold calls: one object per reading of a cluster.
Reads of Slurm's state and the reservation writes go through a backend (``backend``:
``SlurmBackend``; pyslurm or Slurm's commands, ``choice``); job control (``sbatch``, ``scancel``,
``scontrol update/hold/release``) and the few text-only queries run Slurm's commands."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from slurm_arnold.errors import SlurmOutputError
from slurm_arnold.slurm import jobs as _jobs
from slurm_arnold.slurm import partitions as _partitions
from slurm_arnold.slurm import submit as _submit
from slurm_arnold.slurm.accounting import AccountingRecord
from slurm_arnold.slurm.backend import SlurmBackend
from slurm_arnold.slurm.choice import choose_backend
from slurm_arnold.slurm.jobs import UNFINISHED, JobInfo
from slurm_arnold.slurm.nodes import NodeInfo
from slurm_arnold.slurm.reservations import Reservation
from slurm_arnold.slurm.runner import Runner


class Slurm(Runner):
    """Slurm's state and job control. ``env`` overrides the environment (e.g.
    ``SLURM_CONF``); ``use_json=False`` reads every document as text (commands backend);
    ``backend`` is a backend, or one of ``choice.BACKENDS`` (default: the site's
    ``slurm.backend``), chosen on first use."""

    def __init__(self, env: Mapping[str, str] | None = None, *, use_json: bool = True,
                 timeout: float = 120.0, backend: SlurmBackend | str | None = None) -> None:
        super().__init__(env, use_json=use_json, timeout=timeout)
        self._backend = None if backend is None or isinstance(backend, str) else backend
        # Text is the commands' form: asking for it asks for them.
        self._setting = backend if isinstance(backend, str) else (
            None if use_json else "commands")

    @property
    def backend(self) -> SlurmBackend:
        """What serves the reads and the reservation writes (``choice.choose_backend``)."""
        if self._backend is None:
            setting = self._setting
            if setting is None:
                from site_config import load_config

                setting = load_config().slurm.backend
            self._backend = choose_backend(self, setting)
        return self._backend

    # -- reads and reservation writes: the backend's ----------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node with its state and GPUs."""
        return self.backend.nodes()

    def jobs(self, *, unfinished: bool = False, detail: bool = False) -> list[JobInfo]:
        """Every job slurmctld still knows, or with ``unfinished`` only those not finished;
        ``detail`` with their -x and -C too (``slurm_arnold.slurm.jobs.read_jobs`` says what
        each costs)."""
        return self.backend.jobs(unfinished=unfinished, detail=detail)

    def reservations(self) -> list[Reservation]:
        """Every reservation."""
        return self.backend.reservations()

    def accounting(self, job_ids: Sequence[int] = (), *, since: str | None = None,
                   all_users: bool = True) -> list[AccountingRecord]:
        """Finished and running jobs from slurmdbd (``sacct``)."""
        return self.backend.accounting(job_ids, since=since, all_users=all_users)

    def default_partition(self) -> str | None:
        """The cluster's default partition, if one is set."""
        return _partitions.default_partition(self)

    def partition_topology(self, partition: str) -> str | None:
        """The topology.yaml topology ``partition`` uses (its ``Topology=``), None where the
        partition names none (every partition before Slurm 25.05)."""
        return _partitions.partition_topology(self, partition)

    def create_reservation(self, name: str, nodes: Sequence[str], *, users: Sequence[str],
                           start: str = "now", duration: str = "UNLIMITED",
                           flags: Sequence[str] = ()) -> None:
        """Create a reservation on exactly ``nodes`` for ``users``."""
        self.backend.create_reservation(name, nodes, users=users, start=start,
                                        duration=duration, flags=flags)

    def update_reservation(self, name: str, **fields: str) -> None:
        """Update fields (``Nodes``, ``StartTime``, ``Users``, ...) of a reservation."""
        self.backend.update_reservation(name, **fields)

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""
        self.backend.delete_reservation(name)

    # -- commands ---------------------------------------------------------------------
    def submit(self, args: Sequence[str], script: str | None = None) -> int:
        """Submit with ``sbatch --parsable``; return the job id."""
        return _submit.submit(self, args, script)

    def test_only(self, args: Sequence[str]) -> list[str]:
        """The nodes slurmctld would give a job now (``sbatch --test-only``), in its order."""
        return _submit.test_only(self, args)

    def job(self, job_id: int) -> JobInfo | None:
        """One job (any state), or None when slurmctld does not know it (any more)."""
        return _jobs.read_job(self, job_id)

    def unfinished_tasks(self, job_id: int) -> int:
        """How many tasks of job (array) ``job_id`` are not finished yet."""
        return _jobs.unfinished_tasks(self, job_id)

    def topology_text(self, name: str | None = None) -> str:
        """The raw ``scontrol show topology`` output: the cluster's default topology, or the
        one of topology.yaml called ``name`` (Slurm 25.05+; see ``partition_topology``)."""
        return self.run(["scontrol", "show", "topology", *([name] if name else [])]).stdout

    def batch_script(self, job_id: int, limit: int = 1 << 20) -> str | None:
        """The first ``limit`` bytes of a batch job's script as slurmctld keeps it (``scontrol
        write batch_script``: the job's owner, an operator or SlurmUser), or None for a job
        without one (salloc, srun) or one this caller may not read."""
        proc = self.run(["scontrol", "write", "batch_script", str(job_id), "-"], check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout[:limit]

    def cancel(self, job_id: int) -> None:
        """Cancel a job."""
        self.run(["scancel", str(job_id)])

    def update_job(self, job_id: int, **fields: str) -> None:
        """``scontrol update JobId=... Key=Value ...`` (an empty value clears the field)."""
        self.run(["scontrol", "update", f"JobId={job_id}",
                  *(f"{k}={v}" for k, v in fields.items())])

    def hold(self, job_id: int) -> None:
        """Hold a pending job (``scontrol hold``)."""
        self.run(["scontrol", "hold", str(job_id)])

    def release(self, job_id: int) -> None:
        """Release a held job (``scontrol release``)."""
        self.run(["scontrol", "release", str(job_id)])

    def slurm_user(self) -> str:
        """``SlurmUser`` of the cluster (``scontrol show config``), e.g. ``slurm``."""
        for line in self.run(["scontrol", "show", "config"]).stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "SlurmUser":
                return value.strip().split("(")[0]
        raise SlurmOutputError("scontrol show config: no SlurmUser line")

    def finished_accounting(self, job_ids: Sequence[int],
                            timeout: float = 60.0) -> dict[int, AccountingRecord]:
        """Each job's final, settled record, waiting (bounded) until slurmdbd has it whole.

        slurmctld reports a job ended before slurmdbd has its end, and slurmdbd's record is
        briefly partial (:attr:`AccountingRecord.settled`). Raises :class:`SlurmOutputError`
        naming the jobs still unsettled after ``timeout`` seconds."""
        wanted = set(job_ids)
        if not wanted:  # sacct without --jobs would list every job
            return {}
        deadline = time.monotonic() + timeout
        while True:
            ready = {r.job_id: r for r in self.accounting(sorted(wanted))
                     if r.end is not None and r.state not in UNFINISHED and r.settled}
            if wanted <= ready.keys():
                return ready
            if time.monotonic() >= deadline:
                missing = sorted(wanted - ready.keys())
                raise SlurmOutputError(
                    f"sacct has no final record of job(s) {missing} after {timeout:.0f} s; "
                    "is slurmdbd running and the job finished?")
            time.sleep(0.5)
