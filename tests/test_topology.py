"""The topology model and the topology.conf / scontrol parsers, including malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology import parse_topology, read_topology_file

GOOD = """\
# two minipods of two leaves
SwitchName=l0 Nodes=a[1-2]
SwitchName=l1 Nodes=a[3-4]   # trailing comment
SwitchName=l2 \\
    Nodes=b[01-02]
switchname=l3 nodes=b[03-04] LinkSpeed=100
SwitchName=p0 Switches=l[0-1]
SwitchName=p1 Switches=l[2-3]
SwitchName=top Switches=p[0-1]
"""


def test_parses_tree_levels_and_minipods() -> None:
    topo = parse_topology(GOOD, "x.conf")
    assert topo.root.name == "top"
    assert topo.root.level == 2
    assert topo.switches["p1"].level == 1 and topo.switches["l2"].level == 0
    assert topo.switches["l2"].parent == "p1"
    assert topo.nodes == ["a1", "a2", "a3", "a4", "b01", "b02", "b03", "b04"]
    assert topo.minipods() == ["p0", "p1"]
    assert topo.minipod_of("b03") == "p1"
    assert topo.leaf_of("a4") == "l1"
    assert topo.nodes_under("p0") == ["a1", "a2", "a3", "a4"]


def test_minipod_level_is_a_setting() -> None:
    leaves = parse_topology(GOOD, minipod_level=0)
    assert leaves.minipods() == ["l0", "l1", "l2", "l3"]
    whole = parse_topology(GOOD, minipod_level=5)  # deeper than the tree: the top switch
    assert whole.minipods() == ["top"]


def test_unbalanced_tree_uses_the_first_switch_at_or_above_the_level() -> None:
    text = "SwitchName=l0 Nodes=x1\nSwitchName=l1 Nodes=x2\nSwitchName=p Switches=l1\n" \
           "SwitchName=c Switches=l0,p\n"
    topo = parse_topology(text)
    assert topo.minipod_of("x2") == "p"
    assert topo.minipod_of("x1") == "c"  # its leaf hangs straight off the core


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("", None, "no switches"),
        ("# only a comment\n\n", None, "no switches"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n[1-2]\nSwitchName=c Switches=s[0-1]\n",
         2, "node n1 is under two leaf switches"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=s0 Nodes=n2\n", 2, "defined twice"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=c Switches=s0,s9\n", 2, "unknown switch s9"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n2\nSwitchName=c Switches=s0\n",
         2, "s1 has no parent"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=a Switches=s0,b\nSwitchName=b Switches=a\n",
         2, "cycle"),
        ("SwitchName=s0 Nodes=n[1-\n", 1, "bad hostlist"),
        ("SwitchName=s0 Nodes=n1 Colour=red\n", 1, "unknown key 'Colour'"),
        ("Nodes=n1\n", 1, "without SwitchName"),
        ("SwitchName=s0\n", 1, "neither Nodes= nor Switches="),
        ("SwitchName=s0 Nodes=n1 Switches=s0\n", 1, "both Nodes= and Switches="),
        ("SwitchName=s0 Nodes=n1\nSwitchName=c Switches=s0 garbage\n", 2, "expected Key=Value"),
        ("SwitchName=s0 Nodes=n1\nSwitchName=a Switches=s0\nSwitchName=b Switches=s0\n",
         3, "under both a and b"),
        ("SwitchName=s0 Nodes=n1 Nodes=n2\n", 1, "given twice"),
        ("SwitchName=s0 Switches=s0\n", 1, "lists itself"),
    ],
    ids=["empty", "comments-only", "node-two-leaves", "duplicate-switch", "unknown-child",
         "no-parent", "cycle", "bad-hostlist", "unknown-key", "no-switchname", "no-children",
         "nodes-and-switches", "not-key-value", "two-parents", "key-twice", "self-child"],
)
def test_malformed_topology_names_file_and_line(
    tmp_path: Path, text: str, line: int | None, needle: str
) -> None:
    path = tmp_path / "topology.conf"
    path.write_text(text)
    with pytest.raises(TopologyError) as err:
        read_topology_file(str(path))
    message = str(err.value)
    where = f"{path}:{line}:" if line is not None else f"{path}:"
    assert message.startswith(where), message
    assert needle in message, message
    assert "\n" not in message
    assert err.value.line == line


def test_unknown_node_against_the_cluster_node_list(tmp_path: Path) -> None:
    path = tmp_path / "topology.conf"
    path.write_text("SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n3\n"
                    "SwitchName=c Switches=s[0-1]\n")
    with pytest.raises(TopologyError, match=r":2: switch s1: unknown node n3"):
        read_topology_file(str(path), known_nodes=["n1", "n2"])


def test_continuation_line_number_is_the_statement_start(tmp_path: Path) -> None:
    path = tmp_path / "topology.conf"
    path.write_text("SwitchName=s0 Nodes=n1\n\nSwitchName=c \\\n  Switches=s0,zz\n")
    with pytest.raises(TopologyError, match=r":3: switch c: unknown switch zz"):
        read_topology_file(str(path))


def test_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read"):
        read_topology_file(str(tmp_path / "missing.conf"))
    binary = tmp_path / "bin.conf"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TopologyError, match="not a text file"):
        read_topology_file(str(binary))


def test_scontrol_form_with_nodes_on_upper_switches() -> None:
    live = (
        "SwitchName=l0 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
        "SwitchName=l1 Level=0 LinkSpeed=1 Nodes=n[3-4]\n"
        "SwitchName=c Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=l[0-1]\n"
    )
    topo = parse_topology(live, "scontrol show topology", live=True)
    assert topo.nodes == ["n1", "n2", "n3", "n4"]
    assert topo.switches["c"].children == ("l0", "l1")
    with pytest.raises(TopologyError, match="both Nodes= and Switches="):
        parse_topology(live, "topology.conf")
