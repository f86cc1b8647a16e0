"""NVLink domains: topology/block's topology.conf, Slurm's topology.yaml, and what
``arnold topology show`` says of them (issue 23, first slice: the topology model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_arnold.cli.main import main
from slurm_arnold.errors import InfeasibleError, TopologyError
from slurm_arnold.placement import JobShape, Placement, place
from slurm_arnold.rankorder import parse as parse_rankorder
from slurm_arnold.rankorder import write_files
from slurm_arnold.topology import (
    BLOCK_ROOT,
    parse_block_conf,
    parse_topology_yaml,
    read_topology_file,
    tiers,
)

BLOCK_CONF = """\
# NVL72-style racks: 18 nodes of 4 GPUs each
BlockName=rack1 Nodes=gb[001-018]
BlockName=rack2 Nodes=gb[019-036]
BlockName=rack3 Nodes=gb[037-054]
blockname=rack4 nodes=gb[055-072]
BlockName=rack5 Nodes=gb[073-090]
BlockSizes=18,72
"""

YAML = """\
---
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: gb[001-018]
      - switch: leaf2
        nodes: gb[019-036]
- topology: nvl
  block:
    block_sizes: [9, 18]
    blocks:
      - block: d1
        nodes: gb[001-009]
      - block: d2
        nodes: gb[010-018]
      - block: d3
        nodes: gb[019-027]
      - block: d4
        nodes: [gb028, gb029, gb030, gb031, gb032, gb033, gb034, gb035, gb036]
- topology: other
  flat: true
"""


def test_block_conf_builds_slurms_tree_of_blocks() -> None:
    blocks = parse_block_conf(BLOCK_CONF, "b.conf")
    assert list(blocks.members) == ["rack1", "rack2", "rack3", "rack4", "rack5"]
    assert blocks.sizes == (18, 72)
    assert blocks.domain_map()["gb055"] == "rack4"  # keys are case-insensitive


def test_block_levels_follow_block_sizes_then_pairs(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCK_CONF)
    topo = read_topology_file(str(conf))
    # 72 / 18 = 4 racks per level-1 block: racks 1-4, then rack 5 alone; then one root.
    assert topo.path_of("gb001") == ["rack1", f"{BLOCK_ROOT}-l1-0", BLOCK_ROOT]
    assert topo.path_of("gb080") == ["rack5", f"{BLOCK_ROOT}-l1-1", BLOCK_ROOT]
    assert topo.leaf_of("gb020") == "rack2" and topo.minipod_of("gb020") == f"{BLOCK_ROOT}-l1-0"
    assert topo.domain_of("gb040") == "rack3"
    assert tiers(topo) == ["nvlink domain", "minipod", "core"]
    # Past the last BlockSizes entry blocks are joined in pairs, as Slurm's plugin does.
    many = "".join(f"BlockName=r{i} Nodes=n{i}-[1-2]\n" for i in range(5))
    conf.write_text(many)
    topo = read_topology_file(str(conf))
    assert len(topo.path_of("n0-1")) == 4  # r0, pairs, pairs of pairs, root
    assert topo.block_sizes == (2,)        # the smallest block is the base by default


def test_yaml_gives_tree_tiers_and_block_domains(tmp_path: Path) -> None:
    topo = parse_topology_yaml(YAML, "topology.yaml")
    assert topo.leaf_of("gb030") == "leaf2"
    assert topo.domain_of("gb030") == "d4"
    assert topo.domain_of("gb001") == "d1" and topo.path_of("gb001") == ["leaf1", "spine"]
    assert topo.block_sizes == (9, 18)
    # Blocks alone: the tree is Slurm's tree of blocks.
    only_blocks = parse_topology_yaml(YAML[YAML.index("- topology: nvl"):])
    assert only_blocks.leaf_of("gb030") == "d4" and only_blocks.domain_of("gb030") == "d4"
    # A name picks the topology of its kind; the other kind stays the default one.
    second = YAML + YAML[YAML.index("- topology: nvl"):YAML.index("- topology: other")] \
        .replace("topology: nvl", "topology: nvl2").replace("block: d", "block: e")
    assert parse_topology_yaml(second).domain_of("gb001") == "d1"
    named = parse_topology_yaml(second, name="nvl2")
    assert named.domain_of("gb001") == "e1" and named.leaf_of("gb001") == "leaf1"


def test_show_json_keeps_leaf_and_minipod_and_adds_path_and_domain(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(YAML)
    result = CliRunner().invoke(main, ["topology", "show", "--topology", str(path),
                                       "--gpus-per-node", "4", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    node = next(n for n in doc["nodes"] if n["name"] == "gb010")
    assert (node["leaf"], node["minipod"], node["domain"]) == ("leaf1", "spine", "d2")
    assert node["path"] == ["leaf1", "spine"]
    assert doc["tiers"] == ["leaf", "core"]
    assert {d["name"]: d["nodes"] for d in doc["domains"]} == {"d1": 9, "d2": 9, "d3": 9,
                                                               "d4": 9}
    assert all(d["whole_free"] for d in doc["domains"])
    drawn = CliRunner().invoke(main, ["topology", "show", "--topology", str(path)])
    assert "gb[010-018] free (NVLink domain d2)" in drawn.output


def test_tree_conf_has_no_domains(tmp_path: Path) -> None:
    path = tmp_path / "topology.conf"
    path.write_text("SwitchName=l0 Nodes=a[1-2]\nSwitchName=top Switches=l0\n")
    doc = json.loads(CliRunner().invoke(main, ["topology", "show", "--topology", str(path),
                                               "--json"]).output)
    assert [n["domain"] for n in doc["nodes"]] == [None, None]
    assert doc["nodes"][0]["path"] == ["l0", "top"] and doc["domains"] == []


@pytest.mark.parametrize(("name", "text", "message"), [
    ("topology.conf", "BlockName=a Nodes=n[1-4]\nBlockName=b Nodes=n[4-8]\n",
     "node n4 is in two blocks"),
    ("topology.conf", "BlockName=a Nodes=n[1-4]\nBlockSizes=4,12\n", "power of two"),
    ("topology.conf", "BlockName=a Nodes=n[1-4]\nBlockSizes=8\n", "fewer nodes than the base"),
    ("topology.conf", "BlockName=a Nodes=n[1-4]\nBlockSizes=4,x\n", "whole numbers"),
    ("topology.conf", "BlockName=a Nodes=n[1-4] Speed=9\n", "unknown key 'Speed'"),
    ("topology.conf", "BlockName=a\n", "block a has no Nodes="),
    ("topology.conf", "BlockName=a Nodes=n[1-4]\nBlockName=a Nodes=m1\n", "defined twice"),
    ("topology.yaml", "- topology: t\n  tree: [\n", "not valid YAML"),
    ("topology.yaml", "topology: t\n", "expected a list of topologies"),
    ("topology.yaml", "- topology: t\n  flat: true\n", "no tree or block topology"),
    ("topology.yaml", YAML.replace("gb[001-009]", "zz[1-9]"), "node zz1 is not under any"),
    ("topology.yaml", "- topology: t\n  block:\n    blocks: []\n", "needs a list of blocks"),
])
def test_bad_block_topologies_are_one_line(tmp_path: Path, name: str, text: str,
                                           message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TopologyError, match=message):
        read_topology_file(str(path))
    result = CliRunner().invoke(main, ["topology", "show", "--topology", str(path)])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and message.split()[0] in result.output
    assert "Traceback" not in result.output


def test_unknown_name_lists_the_topologies() -> None:
    with pytest.raises(TopologyError, match="no topology named 'x' \\(have fabric, nvl, other"):
        parse_topology_yaml(YAML, name="x")


def _tp_groups_from_rankfile(tmp_path: Path, placement: Placement) -> dict[tuple[int, int],
                                                                          set[str]]:
    """(pp, dp) -> the nodes of that TP group, read back from the rank-order file."""
    rankfile, _ = write_files(tmp_path, placement, "ab12cd34")
    _, entries = parse_rankorder(rankfile.read_text())
    groups: dict[tuple[int, int], set[str]] = {}
    for e in entries:
        groups.setdefault((e.pp, e.dp), set()).add(e.node)
    return groups


def test_tp_groups_spanning_nodes_stay_in_one_domain(tmp_path: Path) -> None:
    topo = parse_topology_yaml(YAML)
    # Free: 7 + 7 nodes of leaf1 split across d1/d2, all of leaf2. TP 8 on 4-GPU nodes: every
    # TP group is 2 nodes, which must share an NVLink domain (not just a leaf).
    free = [f"gb{i:03d}" for i in [*range(3, 10), *range(10, 17), *range(19, 37)]]
    # 3 + 3 + 4 + 4 whole pairs fit: 14 TP groups; the job takes 14, so it must use the
    # odd-sized domains of leaf1 too, where a leaf-only rule could pair gb009 with gb010.
    job = JobShape(tp=8, pp=2, dp=7, gpus_per_node=4)
    placement = place(topo, free, job, algo="mip", alpha=0.5)
    groups = _tp_groups_from_rankfile(tmp_path, placement)
    assert len(groups) == job.pp * job.dp
    assert all(len(nodes) == 2 and len({topo.domain_of(n) for n in nodes}) == 1
               for nodes in groups.values())
    with pytest.raises(InfeasibleError, match="14 fit"):
        place(topo, free, JobShape(tp=8, pp=3, dp=5, gpus_per_node=4), algo="mip", alpha=0.5)


def test_a_tp_group_never_pairs_nodes_of_two_domains_on_one_leaf() -> None:
    topo = parse_topology_yaml(YAML)
    job = JobShape(tp=8, pp=1, dp=1, gpus_per_node=4)
    # gb009 (d1) and gb010 (d2) share leaf1: without domains they would do.
    with pytest.raises(InfeasibleError, match="in one NVLink domain"):
        place(topo, ["gb009", "gb010"], job, algo="mip", alpha=0.5)
    tree_only = parse_topology_yaml(YAML[:YAML.index("- topology: nvl")])
    assert place(tree_only, ["gb009", "gb010"], job, algo="mip", alpha=0.5).cells
    # A domain that spans two leaves lets its TP group do the same.
    wide = YAML.replace("nodes: gb[001-009]", "nodes: gb[001-008],gb019") \
        .replace("nodes: gb[019-027]", "nodes: gb[020-027],gb009")
    topo = parse_topology_yaml(wide)
    assert place(topo, ["gb008", "gb019"], job, algo="mip", alpha=0.5).cells


def test_scontrol_show_topology_of_a_block_partition() -> None:
    # As Slurm 26.05 prints `scontrol show topology nvl` (measured on the 26.05 lane).
    text = ("BlockName=nvlblock0 BlockIndex=0 Nodes=nvl[01-04] BlockSize=4\n"
            "BlockName=nvlblock1 BlockIndex=1 Nodes=nvl[05-08] BlockSize=4\n"
            "AggregatedBlock=nvlblock[0-1] BlockIndex=2 Nodes=nvl[01-08] BlockSize=8\n")
    blocks = parse_block_conf(text, "scontrol show topology nvl", live=True)
    assert list(blocks.members) == ["nvlblock0", "nvlblock1"] and blocks.sizes == (4, 8)
    with pytest.raises(TopologyError, match="unknown key 'BlockIndex'"):
        parse_block_conf(text, "topology.conf")  # a file has no such keys


def test_a_job_fills_partly_used_domains_before_breaking_a_whole_one() -> None:
    topo = parse_topology_yaml(YAML)
    whole = [f"gb{i:03d}" for i in range(1, 10)]        # d1: every node free
    partial = [f"gb{i:03d}" for i in range(10, 15)]     # d2: 5 of 9 free
    job = JobShape(tp=8, pp=1, dp=2, gpus_per_node=4)   # two TP groups of two nodes
    placement = place(topo, whole + partial, job, algo="mip", alpha=0.5)
    assert {topo.domain_of(n) for n in placement.nodes()} == {"d2"}
    # Tree alone (no domains): the fullest leaf group first, as before.
    tree_only = parse_topology_yaml(YAML[:YAML.index("- topology: nvl")])
    assert len(place(tree_only, whole + partial, job, algo="mip", alpha=0.5).nodes()) == 4


def test_place_json_reports_spreads_per_tier(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCK_CONF)
    result = CliRunner().invoke(main, ["place", "--topology", str(conf), "--gpus-per-node", "4",
                                       "--tp", "8", "--pp", "2", "--nodes", "40", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    tiers_seen = [t["tier"] for t in doc["per_tier"]]
    assert tiers_seen == ["nvlink domain", "minipod", "core"]
    minipod = doc["per_tier"][1]
    assert (minipod["max_dp_spread"], minipod["max_pp_spread"]) == (
        doc["metrics"]["max_dp_spread"], doc["metrics"]["max_pp_spread"])
    # 40 nodes do not fit in two racks (36): some DP group or pipeline crosses racks.
    rack = doc["per_tier"][0]
    assert max(rack["max_dp_spread"], rack["max_pp_spread"]) >= 2
    assert all(t["max_dp_spread"] >= 1 for t in doc["per_tier"])


def test_a_users_segment_must_split_the_placement_in_every_domain() -> None:
    from slurm_arnold.errors import ArnoldError
    from slurm_arnold.submit.flow import segment_args

    topo = parse_topology_yaml(YAML)
    # Three TP groups of two nodes: 4 nodes in one domain and 2 in another at best.
    free = [f"gb{i:03d}" for i in (1, 2, 3, 4, 10, 11)]
    placement = place(topo, free, JobShape(tp=8, pp=1, dp=3, gpus_per_node=4), algo="mip",
                      alpha=0.5)
    assert segment_args(placement, topo, None) == ["--segment=2"]
    assert segment_args(placement, topo, 2) == []  # the user's fits: passed on untouched
    for bad in (4, 0):
        with pytest.raises(ArnoldError, match=rf"--segment {bad}: the placement puts \d nodes "
                                              r"in NVLink domain d\d.*passes --segment=2"):
            segment_args(placement, topo, bad)
    # No domains (topology/tree): no segment at all.
    tree_only = parse_topology_yaml(YAML[:YAML.index("- topology: nvl")])
    assert segment_args(place(tree_only, free, JobShape(tp=8, pp=1, dp=3, gpus_per_node=4),
                              algo="mip", alpha=0.5), tree_only, None) == []


@pytest.mark.parametrize(("tp", "cp", "ep", "nvlink"), [
    (4, 1, 4, "tp-ep"),   # 16 ranks: 4 nodes of one rack hold 4 replicas of a stage
    (2, 1, 4, "tp-ep"),   # 8 ranks: 2 nodes
    (4, 2, 1, "tp-cp"),   # 8 ranks: 2 nodes
    (2, 2, 2, "tp-cp"),   # 4 ranks: one node; EP over DP replicas, not in the group
    (8, 2, 2, "tp"),      # the TP group (2 nodes) in a rack; CP peers count as DP
])
def test_nvlink_groups_of_tp_x_ep_and_tp_x_cp_stay_in_one_domain(
        tmp_path: Path, rankorder_check: Path, tp: int, cp: int, ep: int, nvlink: str) -> None:
    import subprocess

    from slurm_arnold.placement import Parallelism

    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCK_CONF)
    topo = read_topology_file(str(conf))
    # Racks fragmented unevenly: 7, 11, 5, 16 and 9 nodes free.
    free = [n for i, n in enumerate(topo.nodes)
            if i % 18 < (7, 11, 5, 16, 9)[i // 18]]
    par = Parallelism.sized(tp, 2, None, 32, 4, cp=cp, ep=ep, nvlink=nvlink)
    placement = place(topo, free, par.shape(4), algo="mip", alpha=0.5)
    rankfile, _ = write_files(tmp_path, placement, "0123abcd", parallelism=par)
    header, entries = parse_rankorder(rankfile.read_text())
    assert int(header["tp"]) == tp and int(header["dp"]) == par.dp
    assert header.get("cp", "1") == str(cp) and header.get("ep", "1") == str(ep)
    assert sorted(e.rank for e in entries) == list(range(par.gpus))
    groups: dict[tuple[int, ...], set[str]] = {}
    for e in entries:
        # Megatron-Core's order tp-cp-ep-dp-pp, EP splitting DP.
        assert e.rank == e.tp + tp * (e.cp + cp * (e.dp + par.dp * e.pp))
        key = {"tp": (e.pp, e.dp, e.cp), "tp-cp": (e.pp, e.dp),
               "tp-ep": (e.pp, e.dp // ep)}[nvlink]
        groups.setdefault(key, set()).add(e.node)
    assert all(len({topo.domain_of(n) for n in nodes}) == 1 for nodes in groups.values())
    assert all(len(nodes) == max(1, par.group // 4) for nodes in groups.values())
    # The plugin's parser reads the same ranks, CP and EP included.
    for e in entries[::7]:
        out = subprocess.run([str(rankorder_check), str(rankfile), e.node, str(e.local_rank)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
        fields = dict(f.split("=") for f in out.stdout.split())
        assert (fields["RANK"], fields["ARNOLD_CP_RANK"], fields["ARNOLD_EP_RANK"]) == (
            str(e.rank), str(e.cp), str(e.dp % ep))


def test_bad_parallelism_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCK_CONF)
    base = ["place", "--topology", str(conf), "--gpus-per-node", "4", "--pp", "2",
            "--nodes", "32"]
    for extra, needle in (
            (["--tp", "4", "--cp", "2", "--ep", "2", "--nvlink-group", "tp-ep"],
             "would make the group TP x CP x EP"),
            (["--tp", "2", "--ep", "3", "--nvlink-group", "tp-ep"], "EP=3 does not divide"),
            (["--tp", "4", "--cp", "3"], "is not a multiple of TP x CP x PP"),
            (["--tp", "2", "--ep", "3", "--dp", "6", "--nvlink-group", "tp-ep", "--nodes", "6"],
             "the NVLink group TP x EP = 6 is not a multiple of the 4 GPUs")):
        result = CliRunner().invoke(main, [*base[:-2], *extra] if "--dp" in extra
                                    else [*base, *extra])
        assert result.exit_code == 1, (extra, result.output)
        assert needle in result.output and result.output.count("\n") == 1, result.output


def test_the_c_parser_checks_cp_and_ep(tmp_path: Path, rankorder_check: Path) -> None:
    import subprocess

    from slurm_arnold.placement import Parallelism

    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCK_CONF)
    topo = read_topology_file(str(conf))
    par = Parallelism(4, 1, 4, cp=2, ep=2, nvlink="tp-cp")
    placement = place(topo, topo.nodes, par.shape(4), algo="mip", alpha=0.5)
    rankfile, _ = write_files(tmp_path, placement, "0123abcd", parallelism=par)
    text = rankfile.read_text()
    lines = text.splitlines()
    first = lines.index("ranks") + 1
    node, local = lines[first].split()[1:3]
    no_cp = [*lines[:first], " ".join(lines[first].split()[:6]), *lines[first + 1:]]
    cp_range = [*lines[:first], " ".join([*lines[first].split()[:6], "2"]), *lines[first + 1:]]
    for name, body, needle in (
            ("no-cp", "\n".join(no_cp) + "\n", "expected \"rank node local_rank tp pp dp cp\""),
            ("cp-range", "\n".join(cp_range) + "\n", "cp rank outside 0..1"),
            ("ep", text.replace("\nep 2\n", "\nep 3\n"), "ep does not divide dp"),
            ("world", text.replace("\ncp 2\n", "\n"), "not tp x cp x pp x dp")):
        path = tmp_path / f"{name}.rankorder"
        path.write_text(body)
        out = subprocess.run([str(rankorder_check), str(path), node, local],
                             capture_output=True, text=True)
        assert out.returncode == 1 and needle in out.stdout, (name, out.stdout)


def test_a_users_segment_steers_the_placement_onto_replicas(tmp_path: Path) -> None:
    from slurm_arnold.placement import Parallelism
    from slurm_arnold.submit.flow import segment_args, steer_segments

    topo = parse_topology_yaml(YAML)
    plain = Parallelism(8, 1, 4)  # TP groups of 2 four-GPU nodes
    # --segment 4: two groups of consecutive replicas per segment.
    assert steer_segments(plain, topo, 4, 4).segment_units == 2
    # A segment of one group, a segment that is not whole groups, too few replicas, and a
    # cluster without domains: left alone (segment_args checks or drops it).
    assert steer_segments(plain, topo, 2, 4) == plain
    assert steer_segments(plain, topo, 3, 4) == plain
    assert steer_segments(Parallelism(8, 1, 3), topo, 4, 4).segment_units == 1
    tree_only = parse_topology_yaml(YAML[:YAML.index("- topology: nvl")])
    assert steer_segments(plain, tree_only, 4, 4) == plain
    # d1 has 7 nodes free, d2 5: the segments of 4 go one to each, whatever the spreads say.
    free = [f"gb{i:03d}" for i in (*range(1, 8), *range(10, 15))]
    par = steer_segments(plain, topo, 4, 4)
    placement = place(topo, free, par.shape(4), algo="mip", alpha=0.5)
    assert segment_args(placement, topo, 4) == []
    rankfile, _ = write_files(tmp_path, placement, "0123abcd", parallelism=par)
    header, entries = parse_rankorder(rankfile.read_text())
    assert (header["tp"], header["dp"]) == ("8", "4")
    groups: dict[int, set[str]] = {}
    for e in entries:
        assert e.rank == e.tp + 8 * e.dp
        groups.setdefault(e.dp, set()).add(e.node)
    # Each TP group is 2 nodes of one domain; replicas 0-1 and 2-3 share a segment.
    assert all(len(nodes) == 2 and len({topo.domain_of(n) for n in nodes}) == 1
               for nodes in groups.values())
    assert {topo.domain_of(n) for n in groups[0] | groups[1]} != {
        topo.domain_of(n) for n in groups[2] | groups[3]}


def test_a_segment_too_big_for_the_replicas_is_mapped_onto_stages(tmp_path: Path) -> None:
    from slurm_arnold.placement import Parallelism
    from slurm_arnold.submit.flow import segment_args, steer_segments

    topo = parse_topology_yaml(YAML)
    # One replica of 4 stages, TP groups of 2 four-GPU nodes: --segment 4 holds two groups,
    # which cannot be replicas (there is one), so it holds two consecutive stages.
    par = steer_segments(Parallelism(8, 4, 1), topo, 4, 4)
    assert (par.segment_units, par.segment_stages) == (1, 2)
    assert steer_segments(Parallelism(8, 3, 1), topo, 4, 4) == Parallelism(8, 3, 1)
    assert par.shape(4).nodes == 8
    # d1 has 6 nodes free, d2 3 and d3 5: a pair of stages takes 4 nodes of one domain.
    free = [f"gb{i:03d}" for i in (*range(1, 7), 10, 11, 12, *range(19, 24))]
    placement = place(topo, free, par.shape(4), algo="mip", alpha=0.5)
    assert segment_args(placement, topo, 4) == []
    rankfile, _ = write_files(tmp_path, placement, "0123abcd", parallelism=par)
    header, entries = parse_rankorder(rankfile.read_text())
    assert (header["tp"], header["pp"], header["dp"]) == ("8", "4", "1")
    assert sorted(e.rank for e in entries) == list(range(32))
    stages: dict[int, set[str]] = {}
    for e in entries:
        assert e.rank == e.tp + 8 * e.pp  # Megatron's order, from the rank's own coordinates
        stages.setdefault(e.pp, set()).add(e.node)
    assert all(len(nodes) == 2 and len({topo.domain_of(n) for n in nodes}) == 1
               for nodes in stages.values())
    # Stages 0-1 share a domain, and so do 2-3: each segment is one pipeline's neighbours.
    for first in (0, 2):
        assert len({topo.domain_of(n) for n in stages[first] | stages[first + 1]}) == 1
    # Each node holds one stage's TP ranks, consecutive, local ranks 0-3.
    by_node: dict[str, list[int]] = {}
    for e in entries:
        by_node.setdefault(e.node, []).append(e.rank)
    assert all(ranks == list(range(ranks[0], ranks[0] + 4)) for ranks in by_node.values())


def test_slurms_block_rule_places_segments_one_by_one() -> None:
    from slurm_arnold.placement.baselines import block_rule

    def names(*numbers: int) -> list[str]:
        return [f"gb{i:03d}" for i in numbers]

    topo = parse_topology_yaml(YAML)  # blocks d1..d4 of 9 nodes, BlockSizes 9, 18
    free = names(*range(1, 6), *range(10, 13), *range(19, 28), 28, 29)
    # d1: 5 free, d2: 3, d3: 9, d4: 2. Segments of 2, one at a time, each to the block with
    # the fewest free nodes that holds one: d4, then d2 (3), then d1 (d2 has 1 left).
    assert block_rule(topo, free, 6, 2) == names(1, 2, 10, 11, 28, 29)
    # No segment: 8 nodes fit one block's size, so one block that holds them (only d3).
    assert block_rule(topo, free, 8) == names(*range(19, 27))
    # 10 nodes: a pair of blocks (d1+d2 has 8 free, d3+d4 11); inside, no block holds all
    # 10, so the fullest first (d3), then the tightest that holds what is left (d4).
    assert block_rule(topo, free, 10) == names(*range(19, 29))
    # 12: the level follows the size alone (pairs) and no pair has 12 free; the job waits.
    assert block_rule(topo, free, 12) is None
    # A segment larger than a base block, or a size that is not whole segments: refused.
    assert block_rule(topo, free, 20, 10) is None
    assert block_rule(topo, free, 5, 2) is None
    # One node: the first free one (what slurmctld 26.05 answers).
    assert block_rule(topo, free, 1, 1) == ["gb001"]


def test_arnold_sbatch_refuses_zero_sizes_in_one_line() -> None:
    from slurm_arnold.errors import ArnoldError
    from slurm_arnold.submit.flow import request_parallelism

    # "--cp 0" once became CP 1 silently, and "--tp 0" divided by zero.
    for ours, tp, needle in (({"cp": "0"}, 4, "--cp 0: must be at least 1"),
                             ({"ep": "0"}, 4, "--ep 0: must be at least 1"),
                             ({}, 0, "--tp 0: must be at least 1")):
        with pytest.raises(ArnoldError, match=needle):
            request_parallelism(ours, tp, 2, None, 4, 8)
    par = request_parallelism({"cp": "2", "ep": "2", "nvlink-group": "tp-cp"}, 4, 2, None, 4, 8)
    assert (par.tp, par.cp, par.ep, par.dp, par.nvlink) == (4, 2, 2, 2, "tp-cp")


def test_the_bucketed_block_rule_matches_the_segment_by_segment_one() -> None:
    """``block_rule`` places segments no larger than a base block through buckets of blocks
    by free nodes (fast on 100k GPUs); the general loop (``_one_segment``) gives the same
    nodes on fragmented NVL racks, for every segment size and count tried."""
    import random
    from itertools import pairwise

    from benchmarks.clusters import fragment
    from benchmarks.placement_nvl import nvl_cluster
    from slurm_arnold.placement.baselines import _one_segment, block_rule, slurm_sort_key

    checked = 0
    for seed in range(4):
        rng = random.Random(seed)
        topo = nvl_cluster(4 * 18 * 30, rng)
        free = fragment(topo, rng.choice((0.3, 0.5, 0.7)), rng)
        for segment in (1, 2, 3, 4, 18):
            for count in (1, 5, len(free) // segment // 2, len(free) // segment):
                if segment * count == 1:
                    continue  # one node: the first free one, a rule of its own
                blocks: dict[str, list[str]] = {}
                for node in topo.nodes:
                    blocks.setdefault(topo.domains[node], [])
                    if node in set(free):
                        blocks[topo.domains[node]].append(node)
                slow: list[str] | None = []
                for _ in range(count):
                    taken = _one_segment(blocks, segment, 18, list(pairwise(topo.block_sizes)))
                    if taken is None or slow is None:
                        slow = None
                        break
                    slow += taken
                fast = block_rule(topo, free, segment * count, segment)
                expected = None if slow is None else sorted(slow, key=slurm_sort_key)
                assert fast == expected, (seed, segment, count)
                checked += expected is not None
    assert checked >= 40
