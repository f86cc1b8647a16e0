"""The site bench's checks on what sacct recorded (offline: the records are written here, in
the shapes the live runs produced)."""

from __future__ import annotations

from benchmarks.site_checks import Finished, shared_nodes

NODES_A = tuple(f"n{i:03d}" for i in range(33, 49))
NODES_B = tuple(f"n{i:03d}" for i in range(33, 44))


def _job(job_id: int, start: int, end: int | None, nodes: tuple[str, ...]) -> Finished:
    return Finished(job_id, f"arnold-site-arnold-{job_id}", "u", "COMPLETED", 0, start, end,
                    nodes)


def test_two_jobs_on_one_node_at_once_are_found() -> None:
    jobs = [_job(1, 100, 120, NODES_A), _job(2, 110, 130, NODES_B), _job(3, 130, 140, NODES_B)]
    assert "jobs 1 and 2 both on n033" in shared_nodes(jobs)
    assert not any("3" in line.split(" both")[0] for line in shared_nodes(jobs))


def test_an_end_the_killed_slurmctld_lost_excuses_only_what_it_gave_out_before_the_kill() -> None:
    # 26.05 CI: job 1 ran 1 s from 28 s, the live slurmctld gave its nodes to job 2 at 30 s,
    # slurmctld was SIGKILLed at 31 s (job 1's end unsaved) and the restarted one recorded
    # job 1 ending at 47 s and job 2 (cancelled later through its id) at 144 s; jobs 3 and 4
    # ran on n033 after the restart.
    jobs = [_job(1, 28, 47, NODES_A), _job(2, 30, 144, NODES_B), _job(3, 48, 52, NODES_B[:4]),
            _job(4, 69, 75, ("n033",))]
    assert shared_nodes(jobs)  # read without the kill: four pairs
    assert shared_nodes(jobs, kills=[31.0]) == []
    # A job the restarted slurmctld placed over one with a trusted end is still found.
    late = [*jobs, _job(5, 60, 200, ("n040",)), _job(6, 70, 80, ("n040",))]
    assert shared_nodes(late, kills=[31.0]) == ["jobs 5 and 6 both on n040"]
    # And two the live slurmctld ran, both ending before the kill (their ends were saved).
    before = [_job(7, 10, 25, ("n050",)), _job(8, 20, 30, ("n050",))]
    assert shared_nodes(before, kills=[31.0]) == ["jobs 7 and 8 both on n050"]
