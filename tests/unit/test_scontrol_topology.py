"""`scontrol show topology` output into the sweep's topology (what the Slurm launch script
labels its Ray nodes with), on captured output (tests/data/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetval.fleet.topology import Topology, TopologyError, expand_hostlist

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_tree_leaves_are_switches_and_the_spines_above_them_racks():
    topo = Topology.from_scontrol(read("scontrol-topology-tree-3level.txt"))
    assert len(topo.groups) == 16 and topo.levels == ["rack", "switch"]
    assert topo.groups["dev0"] == {"rack": "spine1", "switch": "leaf1"}
    assert topo.groups["dev7"] == {"rack": "spine1", "switch": "leaf2"}
    assert topo.groups["dev15"] == {"rack": "spine2", "switch": "leaf4"}
    assert topo.split("dev3", "dev8") == ("rack", "spine1", "spine2")  # a trunk between spines
    assert topo.split("dev3", "dev4") == ("switch", "leaf1", "leaf2")
    # What the launch script passes to `ray start --labels`, read back as Ray labels.
    lines = dict(line.split(" ", 1) for line in topo.label_lines().splitlines())
    assert lines["dev12"] == "fleetval/rack=spine2,fleetval/switch=leaf4"
    labels = {n: dict(kv.split("=") for kv in v.split(",")) for n, v in lines.items()}
    assert Topology.from_labels(labels) == topo


def test_one_switch_above_the_leaves_groups_nothing():
    topo = Topology.from_scontrol(read("scontrol-topology-tree-manpage.txt"))
    assert topo.levels == ["switch"]  # s3 holds every node: no rack level
    assert {topo.group(f"dev{i}", "switch") for i in range(6)} == {"s0"}
    assert topo.group("dev6", "switch") == "s1" and topo.group("dev17", "switch") == "s2"
    assert len(topo.groups) == 18


def test_blocks_are_nvlink_domains():
    topo = Topology.from_scontrol(read("scontrol-topology-block-crusoe.txt"))
    assert topo.levels == ["domain"] and len(topo.groups) == 180
    assert topo.group("slurm-compute-node-000", "domain") == "block01"
    assert topo.group("slurm-compute-node-017", "domain") == "block01"
    assert topo.group("slurm-compute-node-018", "domain") == "block02"
    assert topo.group("slurm-compute-node-179", "domain") == "block10"


def test_no_topology_plugin_and_bad_input():
    assert Topology.from_scontrol("").groups == {}
    with pytest.raises(TopologyError, match=r"scontrol line 2: Nodes 'dev\[5-1\]'"):
        Topology.from_scontrol("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=dev0\n"
                               "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=dev[5-1]")  # fmt: skip
    with pytest.raises(TopologyError, match=r"scontrol line 1: Level='x'"):
        Topology.from_scontrol("SwitchName=s0 Level=x Nodes=dev0")
    assert expand_hostlist("lrdn[0001-0002,0013],x[1-2]y[3-4]") == [
        "lrdn0001", "lrdn0002", "lrdn0013", "x1y3", "x1y4", "x2y3", "x2y4",
    ]  # fmt: skip
