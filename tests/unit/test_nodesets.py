"""Node sets as people read them at fleet size: compressed host lists, environment groups."""

from __future__ import annotations

from fleetval.nodesets import SHOWN, compress, group_env, head, more


def test_host_lists_compress_the_way_slurm_writes_them() -> None:
    names = [f"node-{i}" for i in (9, 1, 2, 3, 4, 5, 6, 7)] + ["gpu-a"]
    assert compress(names) == "gpu-a,node-[1-7,9]"
    assert compress(["gpu007", "gpu008", "gpu010", "gpu11"]) == "gpu11,gpu[007-008,010]"
    assert compress(["node-3"]) == "node-3" and compress([]) == ""


def test_a_long_host_list_is_cut_with_how_many_it_left_out() -> None:
    every_seventh_missing = [f"node-{i}" for i in range(1024) if i % 7]
    cut = compress(every_seventh_missing, limit=3)
    assert cut == "node-[1-6,8-13,15-20...] and 859 more nodes"
    assert len(every_seventh_missing) == 18 + 859
    assert compress(["a", "b"], limit=1) == "a and 1 more node"


def test_head_and_more() -> None:
    shown, left = head(list(range(1024)))
    assert (len(shown), left) == (SHOWN, 1014) and more(
        left, "outliers"
    ) == "and 1,014 more outliers"
    assert head([1, 2]) == ([1, 2], 0) and more(3) == "and 3 more"


def test_nodes_with_identical_environments_are_one_group_showing_only_what_differs() -> None:
    fp = {"gpu_model": "AMD Instinct MI300X", "driver_version": "6.12.12", "rocm_version": "6.4.1"}
    nodes = [{"node": f"node-{j}", **fp, "rccl_version": "2.21.5" if j == 7 else "2.22.3",
              "kernel": None if j == 3 else "6.8.0-60"} for j in range(16)]  # fmt: skip
    env = group_env(
        nodes, ["gpu_model", "driver_version", "rocm_version", "rccl_version", "kernel"]
    )
    assert env.nodes == 16 and env.common == fp
    assert env.text() == "GPU AMD Instinct MI300X, driver 6.12.12, ROCm 6.4.1"
    assert [(g.hosts, g.values) for g in env.groups] == [
        ("node-[0-2,4-6,8-15]", {"rccl_version": "2.22.3", "kernel": "6.8.0-60"}),
        ("node-3", {"rccl_version": "2.22.3", "kernel": ""}),
        ("node-7", {"rccl_version": "2.21.5", "kernel": "6.8.0-60"}),
    ]
    assert env.groups[1].text() == "RCCL 2.22.3, kernel (none)"
    same = group_env(nodes[:3], ["gpu_model", "rocm_version"])
    assert same.shown == () and len(same.groups) == 1 and same.left == (0, 0)


def test_past_shown_groups_the_rest_is_counted() -> None:
    nodes = [{"node": f"n{j}", "kernel": f"k{j % 13}"} for j in range(1024)]
    env = group_env(nodes, ["kernel"])
    assert len(env.shown) == SHOWN and env.left == (
        3,
        sum(len(g.nodes) for g in env.groups[SHOWN:]),
    )
    assert env.to_dict()["groups"][0]["nodes"][:2] == ["n0", "n13"]  # --json: every node
