"""Who is to blame when the process group does not form (pure: answers as recorded)."""

from __future__ import annotations

from fleetval.run.job import RankHandle, join_culprits
from fleetval.run.rank import Placed

RESET = "RuntimeError: [gloo/transport/tcp/pair.cc:537] Connection reset by peer"


def handles(n: int) -> list[RankHandle]:
    out = []
    for i in range(n):
        placed = Placed(
            f"node-{i}", f"id{i}", "10.0.0.1", f"h{i}", (i,), "cuda:0", f"GPU-{i}", 100 + i
        )
        h = RankHandle(actor=None, placed=placed)
        h.ctx = type("Ctx", (), {"rank": i})()  # only .rank is read
        out.append(h)
    return out


def test_a_dead_rank_is_the_culprit_not_the_ranks_waiting_for_it():
    answers = [("ok", None), ("crash", "actor died"), ("pending", None), ("raised", RESET)]
    (c,) = join_culprits(handles(4), answers, 60)
    assert (c.rank, c.node, c.device_id, c.reason, c.pid) == (1, "node-1", "GPU-1", "crash", 101)


def test_a_rank_whose_device_failed_is_not_joined_with_its_error():
    answers = [
        ("pending", None),
        ("raised", "RuntimeError: CUDA error: no CUDA-capable device is detected"),
    ]
    (c,) = join_culprits(handles(2), answers, 60)
    assert (c.rank, c.reason) == (1, "not joined") and "no CUDA-capable device" in c.detail


def test_with_nobody_else_to_blame_the_ranks_that_never_joined_are_named():
    answers = [("ok", None), ("pending", None), ("raised", RESET)]
    got = join_culprits(handles(3), answers, 60)
    assert [(c.rank, c.reason) for c in got] == [(1, "not joined"), (2, "not joined")]
    assert "did not join within 60s" in got[0].detail
