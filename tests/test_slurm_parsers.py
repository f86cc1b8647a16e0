"""Parsers of the Slurm adapter on fixed text (the live tests check them against real Slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_arnold.errors import SlurmConfMissing, SlurmError, SlurmNotFound
from slurm_arnold.slurm import Slurm, parse_gpu_count, parse_oneliner


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu:2(IDX:0,2)", 2), ("gpu:a100:2,gpu:v100:1", 3),
     ("mps:100,gpu:4", 4), ("(null)", 0), ("", 0), (None, 0), ("gpu:0", 0), ("mps:8", 0)],
)
def test_gpu_count(gres: str | None, count: int) -> None:
    assert parse_gpu_count(gres) == count


def test_oneliner_keeps_values_with_spaces() -> None:
    f = parse_oneliner("NodeName=n1 OS=Linux 6.1 #1 SMP  RealMemory=10 State=IDLE+DRAIN")
    assert f["OS"] == "Linux 6.1 #1 SMP"
    assert f["State"] == "IDLE+DRAIN"


def test_missing_command_is_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmNotFound, match="`sinfo` not found"):
        Slurm().version()


def test_failure_carries_command_code_and_stderr(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    # A slurm.conf the real sinfo cannot parse: it fails before it contacts anything.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ThisIsNot=AValidKey\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with pytest.raises(SlurmError) as err:
        Slurm().nodes()
    assert err.value.command[0] == "sinfo"
    assert err.value.returncode != 0
    assert "ThisIsNot" in err.value.stderr


def test_a_missing_slurm_conf_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm's own commands would spend a minute looking for a configless controller.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    with pytest.raises(SlurmConfMissing, match=r"SLURM_CONF=/nonexistent/slurm\.conf does not"):
        Slurm().nodes()


def test_parse_test_only_line() -> None:
    from slurm_arnold.errors import SlurmOutputError
    from slurm_arnold.slurm import parse_test_only

    line = ("sbatch: Job 8 to start at 2026-11-29T09:19:03 using 256 processors on nodes "
            "n[001-003,010] in partition gpu\n")
    assert parse_test_only(line) == ["n001", "n002", "n003", "n010"]
    # Slurm 26.05.5, verbatim (its stray "a" after the time).
    newer = ("sbatch: Job 2600049 to start at 2026-12-01T10:58:04 a using 256 processors on "
             "nodes n[017-032] in partition gpu")
    assert parse_test_only(newer) == [f"n{i:03d}" for i in range(17, 33)]
    with pytest.raises(SlurmOutputError):
        parse_test_only(newer.replace(" a using", " a b using"))
    with pytest.raises(SlurmOutputError):
        parse_test_only("allocation failure: Requested node configuration is not available")


def test_v004x_numbers_and_job_states_read_as_the_text_does() -> None:
    from slurm_arnold.slurm import json_family
    from slurm_arnold.slurm.common import job_state as _job_state
    from slurm_arnold.slurm.common import number as _number

    assert _number({"set": True, "infinite": False, "number": 30}) == 30
    assert _number({"set": False, "infinite": False, "number": 0}) is None
    assert _number({"set": True, "infinite": True, "number": 0}) is None
    assert _number(7) == 7 and _number(None) is None
    assert _job_state(["RUNNING"]) == "RUNNING"
    # squeue's text shows the flag, not the base state, while a job completes or requeues.
    assert _job_state(["RUNNING", "COMPLETING"]) == "COMPLETING"
    assert _job_state(["PENDING", "REQUEUED"]) == "REQUEUED"
    assert _job_state("pending") == "PENDING" and _job_state([]) == ""
    assert json_family((22, 5)) == "v0.0.38"
    assert json_family((23, 11)) is None and json_family((24, 5)) is None
    assert json_family((24, 11)) == json_family((26, 5)) == "v0.0.4x"


def _sacct_line(nodes: str, nnodes: int, state: str = "COMPLETED") -> str:
    return (f"401|wrap|root|root|root|gpu|normal|{state}|0:0|{nodes}|{nnodes}|"
            f"billing=1,gres/gpu={8 * nnodes}|2026-12-03T00:45:53|2026-12-03T00:45:53|"
            "2026-12-03T00:45:53|3")


def test_a_record_slurmdbd_has_not_filled_in_is_not_settled() -> None:
    from slurm_arnold.slurm.accounting import accounting_from_json as _accounting_from_json
    from slurm_arnold.slurm.accounting import (
        accounting_from_sacct_text as _accounting_from_sacct_text,
    )

    # 22.05's sacct text for a 24-node job in the second after it ended (seen live, as
    # `sacct -X -P -o NodeList,NNodes,State`: "n001|24|COMPLETED", then "n[001-024]|24|...").
    partial, whole, one, never = _accounting_from_sacct_text("\n".join([
        _sacct_line("n001", 24), _sacct_line("n[001-024]", 24), _sacct_line("n007", 1),
        _sacct_line("None assigned", 2, "CANCELLED by 0")]))
    assert not partial.settled
    assert whole.settled and len(whole.nodes) == 24
    assert one.settled and never.settled and never.nodes == ()
    # The same moment in --json: one node and allocation_nodes 0.
    record = {"job_id": 401, "nodes": "n001", "allocation_nodes": 0,
              "state": {"current": "COMPLETED"}, "time": {"start": 1, "end": 2}}
    assert not _accounting_from_json({"jobs": [record]})[0].settled
    record |= {"nodes": "n[001-024]", "allocation_nodes": 24}
    assert _accounting_from_json({"jobs": [record]})[0].settled


def test_no_jobs_asked_is_no_sacct_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # sacct without --jobs lists every job of the cluster: asking for none must not call it.
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("sacct was called")

    slurm = Slurm()
    monkeypatch.setattr(slurm, "run", refuse)
    monkeypatch.setattr(slurm, "json_doc", refuse)
    assert slurm.finished_accounting([]) == {}


def test_excluded_nodes_and_features_of_the_narrow_squeue_read() -> None:
    from slurm_arnold.slurm.jobs import narrowing_from_squeue_text

    text = ("12|n[001-003],n009|a100&ib\n"
            "13||(null)\n"
            "14|n002|nvl|a100\n"  # an OR of features holds "|"
            "garbage\n")
    assert narrowing_from_squeue_text(text) == {
        12: (("n001", "n002", "n003", "n009"), "a100&ib"),
        13: ((), ""),
        14: (("n002",), "nvl|a100"),
    }


@pytest.mark.parametrize(("text", "reason"), [
    ("ReqNodeNotAvail, UnavailableNodes:n[001-016,049-064]", "ReqNodeNotAvail"),
    ("ReqNodeNotAvail, May be reserved for other job", "ReqNodeNotAvail"),
    ("Resources", "Resources"),
    ("launch failed requeued held", "launch failed requeued held"),
    ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
     "partitions", "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
     "priority partitions"),
])
def test_squeue_texts_description_reads_as_the_reason_the_json_gives(text: str,
                                                                       reason: str) -> None:
    from slurm_arnold.slurm.jobs import reason_of

    assert reason_of(text) == reason
