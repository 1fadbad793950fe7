"""Attribution on simulated rollout histories (`fleetval.testing.rollouts`): each scenario a test, a few seeds.

The figures over many seeds, and at 1,024 nodes x 90 nights, are bench/bench_attribute.py's.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fleetval.analysis.attribute import Attribution, attribute
from fleetval.analysis.attribute_format import to_markdown
from fleetval.testing.rollouts import AFFECTED, simulate

SEEDS = range(4)
KEYS = {"component", "from", "to", "collective", "size_bytes", "dtype", "gpu_model", "metric",
        "effect_pct", "ci_pct", "q", "nodes", "nights", "verdict"}  # fmt: skip


def run(**kw) -> Attribution:
    h = simulate(**kw)
    return attribute(h.values, h.nodes, h.nights, suite="nightly")


def attributed(a: Attribution) -> list[tuple[str, int]]:
    return [(f.component, f.identity["size_bytes"]) for f in a.findings
            if f.verdict in ("regression", "improvement")]  # fmt: skip


@pytest.mark.parametrize("seed", SEEDS)
def test_planted_rccl_loss_is_named_at_the_affected_sizes_only(seed):
    a = run(seed=seed)
    hits = [f for f in a.findings if f.verdict == "regression"]
    assert {(f.component, f.from_version, f.to_version) for f in hits} == {
        ("rccl", "2.18.6", "2.20.5")
    }
    assert sorted(f.identity["size_bytes"] for f in hits) == [
        AFFECTED,
        AFFECTED << 2,
        AFFECTED << 4,
    ]
    assert all(-12 < f.effect_pct < -4 and f.q < 0.01 for f in hits)
    assert attributed(a) == [(f.component, f.identity["size_bytes"]) for f in hits]
    assert a.exit_code == 1 and not a.confounded


def test_intervals_cover_the_planted_loss_at_about_their_level():
    cover = [
        f.ci_pct[0] <= -8 <= f.ci_pct[1]
        for seed in range(12)
        for f in run(seed=100 + seed).findings
        if f.component == "rccl" and f.identity["size_bytes"] >= AFFECTED
    ]
    assert len(cover) == 36 and np.mean(cover) >= 0.85


@pytest.mark.parametrize("seed", SEEDS)
def test_nothing_planted_nothing_attributed(seed):
    a = run(seed=seed, scenario="null")
    assert attributed(a) == [] and a.exit_code == 0
    assert {f.component for f in a.findings} == {"driver", "rocm", "rccl"}
    assert {f.verdict for f in a.findings} == {"unchanged"}


@pytest.mark.parametrize("seed", SEEDS)
def test_rocm_and_rccl_on_every_node_one_night_is_confounded_never_attributed(seed):
    a = run(seed=seed, scenario="together")
    assert [x for x in attributed(a) if x[0] != "driver"] == []
    both = [f for f in a.findings if f.component in ("rocm", "rccl")]
    assert {f.verdict for f in both} == {"confounded"} and {f.nights for f in both} == {0}
    (c,) = a.confounded
    assert c.components == ("rocm", "rccl") and "same night" in c.why
    assert c.changes == ("rocm 6.1.3->6.2.4", "rccl 2.18.6->2.20.5")
    # the fleet-wide step is big enough to say so: a confounded regression exits 1
    assert c.regressed and a.exit_code == 1
    labels = [g["label"] for g in c.plan["groups"]]
    assert labels == ["canary=control", "canary=rocm-6.2.4", "canary=rccl-2.20.5"]
    assert c.plan["groups"][2]["pin"] == {"rocm_version": "6.1.3", "rccl_version": "2.20.5"}
    assert all(len(g["nodes"]) == 2 for g in c.plan["groups"]) and c.plan["suite"] == "nightly"


def test_rocm_and_rccl_on_the_same_nodes_and_nights_is_one_joint_effect():
    a = run(seed=5, scenario="bundled")
    (c,) = a.confounded
    assert c.components == ("rocm", "rccl") and "always changed together" in c.why
    joint = [
        f for f in a.findings if f.component == "rccl" and f.identity["size_bytes"] >= AFFECTED
    ]
    assert all(f.verdict == "confounded" and f.ci_pct[0] < -8 < f.ci_pct[1] for f in joint)
    assert a.exit_code == 1 and attributed(a) == []


def test_a_change_on_one_node_is_insufficient_and_says_what_is_missing():
    h = simulate(seed=7, scenario="null")
    one = pc.equal(h.nodes["node"], "node-0003")
    late = pc.greater_equal(h.nodes["run_id"], sorted(h.nights)[20])
    firmware = pc.if_else(pc.and_(one, late), '{"firmware": "1.2.0"}', '{"firmware": "1.1.0"}')
    nodes = h.nodes.set_column(h.nodes.schema.get_field_index("extra"), "extra", firmware)
    a = attribute(h.values, nodes, h.nights)
    fw = [f for f in a.findings if f.component == "firmware"]
    assert fw and {f.verdict for f in fw} == {"insufficient"}
    assert {(f.from_version, f.to_version) for f in fw} == {("1.1.0", "1.2.0")}
    (note,) = [n for n in a.notes if n.startswith("firmware")]
    assert "1 node(s) on the new version" in note and "need 2" in note


def test_firmware_recorded_in_extra_is_a_component():
    h = simulate(seed=8)
    fw = pc.binary_join_element_wise('{"firmware": "', h.nodes["rccl_version"], '"}', "")
    nodes = h.nodes.set_column(h.nodes.schema.get_field_index("extra"), "extra", fw)
    nodes = nodes.set_column(nodes.schema.get_field_index("rccl_version"), "rccl_version",
                             pa.nulls(len(nodes), pa.string()))  # fmt: skip
    a = attribute(h.values, nodes, h.nights)
    assert {c for c, _ in attributed(a)} == {"firmware"}


def test_a_change_on_every_node_one_night_alone_is_confounded_with_the_night():
    h = simulate(seed=9, scenario="null")
    night = pc.greater_equal(h.nodes["run_id"], sorted(h.nights)[15])
    kernel = pc.if_else(night, "6.8.0-45-generic", "5.15.0-119-generic")
    nodes = h.nodes.set_column(h.nodes.schema.get_field_index("kernel"), "kernel", kernel)
    a = attribute(h.values, nodes, h.nights)
    (c,) = a.confounded
    assert c.components == ("kernel",) and "same night" in c.why and not c.regressed
    assert [g["label"] for g in c.plan["groups"]] == ["canary=control"]
    assert a.exit_code == 0


def test_json_has_exactly_the_documented_keys():
    d = json.loads(run(seed=1, scenario="together").to_json())
    assert set(d) == {"findings", "confounded", "notes"}
    assert all(set(f) == KEYS for f in d["findings"])
    assert all(set(c) == {"components", "changes", "why", "plan"} for c in d["confounded"])
    f = next(f for f in d["findings"] if f["verdict"] == "unchanged")
    assert f["from"] == "6.8.5" and len(f["ci_pct"]) == 2 and 0 <= f["q"] <= 1


def test_markdown_names_the_change_and_the_plan():
    md = to_markdown(run(seed=2, scenario="together"))
    assert "| driver |" not in md  # unchanged rows are left out
    assert "**Confounded**: rocm 6.1.3->6.2.4, rccl 2.18.6->2.20.5" in md and "canary=control" in md


def test_no_version_change_says_so():
    h = simulate(seed=1)
    first = pa.array(sorted(h.nights)[:3])  # every rollout starts later
    values, nodes = (t.filter(pc.is_in(t["run_id"], value_set=first)) for t in (h.values, h.nodes))
    a = attribute(values, nodes, h.nights)
    assert a.findings == () and a.exit_code == 0 and a.notes


def test_latency_is_worse_when_it_grows():
    h = simulate(seed=4)
    lat = h.values.set_column(h.values.schema.get_field_index("metric"), "metric",
                              pa.array(["latency_us"] * len(h.values)))  # fmt: skip
    lat = lat.set_column(lat.schema.get_field_index("value"), "value", pc.divide(1.0, lat["value"]))
    a = attribute(lat, h.nodes, h.nights, metric="latency")
    hits = [f for f in a.findings if f.verdict == "regression"]
    assert {f.component for f in hits} == {"rccl"} and all(f.effect_pct > 4 for f in hits)


def test_bad_input_is_a_clear_error():
    h = simulate(seed=1)
    with pytest.raises(ValueError, match="no busbw or latency measurement"):
        attribute(h.values, h.nodes, h.nights, metric="latency")
    with pytest.raises(ValueError, match="metric: 'watts' is not one of busbw, latency"):
        attribute(h.values, h.nodes, h.nights, metric="watts")
    with pytest.raises(ValueError, match="scenario"):
        simulate(scenario="nope")
