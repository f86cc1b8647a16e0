"""Rank order: the formula, local ranks, the file, and the C parser the plugin uses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_arnold.placement import JobShape, place
from slurm_arnold.rankorder import parse, rank_entries, render, write_files
from tests.test_placement import tree

TOPO = tree([[4, 4], [4, 4], [4, 4]])


@pytest.mark.parametrize(("tp", "pp", "dp"), [(8, 2, 4), (4, 2, 8), (16, 2, 2), (2, 3, 8)])
def test_ranks_follow_megatron_order_and_local_ranks_are_tp_order(tp: int, pp: int,
                                                                   dp: int) -> None:
    job = JobShape(tp, pp, dp, 8)
    placement = place(TOPO, TOPO.nodes, job, algo="mip", alpha=0.5)
    entries = rank_entries(placement)
    assert [e.rank for e in entries] == list(range(tp * pp * dp))
    for e in entries:
        assert e.rank == e.tp + tp * (e.dp + dp * e.pp)
    by_node: dict[str, list[int]] = {}
    for e in entries:
        by_node.setdefault(e.node, []).append(e.local_rank)
    assert all(sorted(v) == list(range(8)) for v in by_node.values())
    # the nodes of each (pp, dp) TP group are the placement's cells
    for e in entries:
        cell_nodes = placement.cells[(e.pp, e.dp // job.replicas_per_node)]
        assert e.node in cell_nodes


def test_other_order_is_recorded(tmp_path: Path) -> None:
    job = JobShape(8, 2, 3, 8)
    placement = place(TOPO, TOPO.nodes, job, algo="mip")
    rankfile, hostfile = write_files(tmp_path, placement, "0123abcd4567ef89", "tp-pp-dp")
    header, entries = parse(rankfile.read_text())
    assert header["order"] == "tp-pp-dp"
    assert all(e.rank == e.tp + 8 * (e.pp + 2 * e.dp) for e in entries)
    assert hostfile.read_text().splitlines() == [e.node for e in entries]


@pytest.fixture
def good_file(tmp_path: Path) -> tuple[Path, list[str]]:
    job = JobShape(4, 2, 4, 8)
    placement = place(TOPO, TOPO.nodes, job, algo="mip")
    text = render(rank_entries(placement), placement, "feedc0de00000001")
    path = tmp_path / "good.rankorder"
    path.write_text(text)
    return path, text.splitlines()


def test_c_parser_agrees_with_the_python_writer(rankorder_check: Path,
                                                good_file: tuple[Path, list[str]]) -> None:
    path, _ = good_file
    header, entries = parse(path.read_text())
    for e in entries:
        out = subprocess.run([str(rankorder_check), str(path), e.node, str(e.local_rank)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
        assert out.stdout.split() == [
            f"RANK={e.rank}", f"LOCAL_RANK={e.local_rank}", f"WORLD_SIZE={len(entries)}",
            f"MASTER_ADDR={header['master_addr']}", f"MASTER_PORT={header['master_port']}",
            f"ARNOLD_TP_RANK={e.tp}", f"ARNOLD_PP_RANK={e.pp}", f"ARNOLD_DP_RANK={e.dp}",
            "ARNOLD_CP_RANK=0", "ARNOLD_EP_RANK=0", "ARNOLD_PLACEMENT_ID=feedc0de00000001"]


def _mutations(lines: list[str]) -> list[tuple[str, str, str]]:
    """(name, text, expected message part) for malformed variants of a good file."""
    body = "\n".join(lines) + "\n"
    first_rank = lines.index("ranks") + 1
    bad_rank = lines.copy()
    bad_rank[first_rank] = bad_rank[first_rank].replace("0 ", "7 ", 1)
    too_many = [*lines, lines[-1]]
    missing = [ln for ln in lines if not ln.startswith("master_port")]
    twice = [*lines[:2], lines[1], *lines[2:]]
    tp_range = lines.copy()
    f = tp_range[first_rank].split()
    f[3] = "99"
    tp_range[first_rank] = " ".join(f)
    node_bad = lines.copy()
    f = node_bad[first_rank].split()
    f[1] = "n0$1"
    node_bad[first_rank] = " ".join(f)
    dup = lines.copy()
    dup[first_rank + 1] = dup[first_rank].replace("0 ", "1 ", 1)
    return [
        ("magic", body.replace("arnold-rankorder v1", "arnold-rankorder v9"), "line 1:"),
        ("no-newline", body.rstrip("\n"), "does not end with a newline"),
        ("long-line", body.replace("ranks\n", "# " + "x" * 600 + "\nranks\n"), "longer than"),
        ("rank-sequence", "\n".join(bad_rank) + "\n", "expected rank 0"),
        ("too-many", "\n".join(too_many) + "\n", "more ranks than world_size"),
        ("missing-header", "\n".join(missing) + "\n", "header master_port missing"),
        ("header-twice", "\n".join(twice) + "\n", "given twice"),
        ("tp-range", "\n".join(tp_range) + "\n", "tp rank outside"),
        ("node-name", "\n".join(node_bad) + "\n", "bad node name"),
        ("truncated", "\n".join(lines[:-3]) + "\n", "ranks listed, world_size is"),
        ("empty", "", "empty file"),
        ("nul", body.replace("ranks", "ra\0nks"), "control character"),
        ("unknown-header", body.replace("placement_id", "placement_idx"), "unknown header"),
        ("world-mismatch", body.replace("\ntp 4\n", "\ntp 2\n"), "not tp x cp x pp x dp"),
        ("dup-local", "\n".join(dup) + "\n", ""),
        ("number", body.replace("master_port ", "master_port 0"), "bad master_port"),
    ]


def test_c_parser_rejects_malformed_files(rankorder_check: Path, tmp_path: Path,
                                          good_file: tuple[Path, list[str]]) -> None:
    _, lines = good_file
    _header, entries = parse("\n".join(lines) + "\n")
    node, local = entries[0].node, entries[0].local_rank
    for name, text, needle in _mutations(lines):
        path = tmp_path / f"{name}.rankorder"
        path.write_bytes(text.encode())
        out = subprocess.run([str(rankorder_check), str(path), node, str(local)],
                             capture_output=True, text=True)
        assert out.returncode == 1, (name, out.stdout)
        assert out.stdout.startswith(f"arnold: {path}: "), (name, out.stdout)
        assert needle in out.stdout, (name, out.stdout)
        assert out.stdout.count("\n") == 1


def test_c_parser_reports_absent_node(rankorder_check: Path,
                                      good_file: tuple[Path, list[str]]) -> None:
    path, _ = good_file
    out = subprocess.run([str(rankorder_check), str(path), "nosuchnode", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert "no rank for node nosuchnode local rank 0" in out.stdout
