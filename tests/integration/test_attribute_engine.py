"""Attribution over real stored runs from the engine (the shared Ray cluster, gloo): the rows,
nodes and summaries the engine writes are what attribution reads."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from fleetval.analysis.attribute import attribute, attribute_store
from fleetval.analysis.runvalues import run_values
from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite

pytestmark = pytest.mark.usefixtures("ray_session")

SUITE = {
    "name": "tiny-nightly",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [
        {"check": "bandwidth", "collectives": ["all_reduce"], "sizes": {"min": "64KiB", "max": "256KiB"},
         "warmup": 1, "iters": 5},
    ],
}  # fmt: skip


def test_real_runs_are_read_per_node_and_a_one_node_change_is_confounded(tmp_path, warm_pool):
    # NOTE: the second night's run is on the first's ranks (the warm pool). It once read
    # rank 0 late (59 us, 3.0x the noise): one size's burst of three counted over the
    # threshold alone, since fixed (`detect.lateness._cap`).
    store = Store(tmp_path)
    suite = parse_suite(SUITE)
    runs = [run_suite(suite, store, labels={"night": n}, pool=warm_pool).run_id for n in "ab"]
    statuses = [store.run(r).status for r in runs]
    assert all(s in ("pass", "unjudged") for s in statuses), statuses

    # Same versions on both nights: nothing changed, nothing attributed; --where reads labels.
    same = attribute_store(store)
    assert same.findings == () and same.exit_code == 0
    assert any("no component changed" in n for n in same.notes)
    assert attribute_store(store, where={"night": "b"}).findings == ()

    # The same real rows, as if the second night ran a new torch on the (one) node: a change
    # that reached every node on one night is confounded, never attributed.
    values = run_values(store.summaries(runs), models=None, cutoff_bytes=64 << 10)
    values = values.rename_columns(["node" if c == "group" else c for c in values.column_names])
    nodes = store.nodes(runs)
    # NOTE: the ranks land on one node or two of the shared cluster, whichever has room
    measured = set(nodes["node"].to_pylist())
    new = pc.if_else(pc.equal(nodes["run_id"], runs[1]), "9.9.9", nodes["torch_version"])
    nodes = nodes.set_column(nodes.schema.get_field_index("torch_version"), "torch_version", new)
    nights = {r: f"2026-01-0{k + 1}" for k, r in enumerate(runs)}
    a = attribute(values, nodes, nights)
    assert {f.component for f in a.findings} == {"torch"}
    assert {f.identity["size_bytes"] for f in a.findings} == {64 << 10, 128 << 10, 256 << 10}
    assert {f.verdict for f in a.findings} == {"confounded"} and a.exit_code == 0
    (c,) = a.confounded
    assert c.components == ("torch",) and "same night" in c.why
    assert (
        c.plan["groups"][0]["nodes"]
        and set(c.plan["groups"][0]["nodes"]) <= measured
        and c.plan["groups"][0]["pin"]["torch_version"] != "9.9.9"
    )
