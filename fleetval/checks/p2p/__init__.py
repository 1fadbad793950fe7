"""Point-to-point (send/recv) bandwidth between pairs of ranks, a round of disjoint pairs at
a time: what a link between two ranks (two nodes, in a fleet sweep) carries, measured
without the rest of the ring, and checked exactly. Rows name the peer (`details.peer`,
`details.peer_node`), so a slow link is named as a pair.

Sign-off: the `p2p` gate (every pair at or above `min_gbps` at its largest size).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PositiveFloat

from fleetval.checks.p2p.params import P2pParams
from fleetval.checks.spec import CheckPlugin, Gate, GateInputs, Outcome, row_evidence, tally
from fleetval.metrics import BUSBW, CORRECT, LATENCY


def pair_rounds(world: int, pattern: Literal["ring", "all"]) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint rank pairs: a ring (each rank with its neighbours) in 2 or 3 rounds,
    or every pair in world-1 rounds (world rounds when odd): the circle method."""
    if world < 2:
        return []
    if pattern == "ring":
        pairs = sorted({tuple(sorted((r, (r + 1) % world))) for r in range(world)})
        rounds: list[list[tuple[int, int]]] = []
        for pair in pairs:  # greedy: the first round where neither rank is busy
            slot = next((rd for rd in rounds if not {*pair} & {r for p in rd for r in p}), None)
            if slot is None:
                rounds.append(slot := [])
            slot.append(pair)
        return rounds
    ring = list(range(world)) + ([-1] if world % 2 else [])  # -1: a bye
    n = len(ring)
    out = []
    for _ in range(n - 1):
        pairs = [tuple(sorted((ring[i], ring[n - 1 - i]))) for i in range(n // 2)]
        out.append([p for p in pairs if -1 not in p])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


class P2pGate(BaseModel):
    """Every pair's send/recv bandwidth at its largest size at least `min_gbps`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gbps: PositiveFloat


def _p2p(inp: GateInputs, cfg: P2pGate) -> Outcome:
    rows = [r for r in inp.rows if r["check"] == "p2p" and r["busbw_gbps"] is not None]
    if not rows:
        return Outcome(None, "no p2p rows in this run", [])
    largest: dict[tuple[Any, ...], int] = defaultdict(int)
    for r in rows:
        largest[(r["step"], r["job"])] = max(largest[(r["step"], r["job"])], r["size_bytes"])
    evidence = []
    for r in rows:
        if r["size_bytes"] != largest[(r["step"], r["job"])]:
            continue
        peer = (r["details"] or {}).get("peer_node") or f"rank {(r['details'] or {}).get('peer')}"
        ok = r["busbw_gbps"] >= cfg.min_gbps
        text = (f"rank {r['rank']} on {r['node']} <-> {peer}: {r['busbw_gbps']:.4g} GB/s "
                f"{'>=' if ok else '<'} {cfg.min_gbps:g} GB/s")  # fmt: skip
        evidence.append(row_evidence(r, ok, text, value=r["busbw_gbps"], expected=cfg.min_gbps,
                                     unit="GB/s"))  # fmt: skip
    return tally(evidence, noun="pair direction", missed="pair directions below the minimum",
                 met="at or above the minimum", none="no p2p rows in this run")  # fmt: skip


GATE = Gate(
    name="p2p",
    config=P2pGate,
    evaluate=_p2p,
    requires=lambda c: f"every pair's send/recv busbw at its largest size >= {c.min_gbps:g} GB/s",
    order=35,
)

PLUGIN = CheckPlugin(
    name="p2p",
    params=P2pParams,
    doc="Every listed pair of ranks moves data both ways at the expected rate, and exactly.",
    metrics=(BUSBW, LATENCY, CORRECT),
    gate=GATE,
)
