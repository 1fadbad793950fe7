"""Benchmark: how often late-rank detection and sub-group bisection name the wrong rank or
miss the right one, over seeded repeats, for each fault kind; the old straggler rule
("last in >= 60% of iterations and >= 5 ms late") is the peer, judged on the same samples.

    python bench/bench_lateness.py                  # synthetic: 200 repeats per case
    python bench/bench_lateness.py --repeats 50 --real 5   # plus 5 real runs per fault (Ray + gloo)
    python bench/bench_lateness.py --real-isolate 10       # plus 10 real isolate steps per case

Synthetic samples model a blocking collective: each rank arrives after a heavy-tailed
(lognormal) jitter plus its delay, the collective runs for everyone from the last
arrival, ranks leave a little apart; a rank's sample is its leave minus its arrival.
A throttled rank (stopped `stop` ms in every `period`) stalls the collective for everyone
when the stop falls inside it, and arrives late when it falls between collectives.
Exits 1 when a false culprit appears in a clean case.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleetval.detect.bisection import isolate
from fleetval.detect.lateness import late_ranks_in_step
from fleetval.store.schema import Row


@dataclass(frozen=True)
class Fabric:
    """What one iteration costs and how much it varies."""

    name: str
    base_us: float  # the collective at the smallest size; doubles per size
    jitter_us: float  # arrival jitter scale (lognormal, sigma 1)


GPU = Fabric("gpu-like", 30.0, 1.0)
CPU = Fabric("cpu-like", 1000.0, 300.0)


def samples(
    rng: np.random.Generator,
    world: int,
    iters: int,
    fabric: Fabric,
    size_index: int,
    delay_us: dict[int, float],
    throttle: tuple[int, float, float] | None,
) -> np.ndarray:
    base = fabric.base_us * 2**size_index
    arrive = rng.lognormal(0.0, 1.0, (world, iters)) * fabric.jitter_us
    for r, d in delay_us.items():
        arrive[r] += d
    duration = base * (1 + 0.2 * rng.random(iters))
    if throttle is not None:
        rank, stop_us, period_us = throttle
        # Where in its cycle each iteration starts; a stop covering the collective stalls all,
        # one landing in the gap between collectives (10% of the loop) delays arrival.
        phase = rng.random(iters) * period_us
        stalled = np.clip(stop_us - phase, 0, None) * (phase < stop_us)
        inside = rng.random(iters) > 0.1
        duration = duration + stalled * inside
        arrive[rank] += stalled * ~inside
    leave = arrive.max(axis=0) + duration
    skew = rng.normal(0, fabric.jitter_us / 4, (world, iters)).clip(0)
    return leave + skew - arrive


def rows(
    rng: np.random.Generator,
    world: int,
    fabric: Fabric,
    delay_us: dict[int, float],
    throttle: tuple[int, float, float] | None = None,
    sizes: int = 6,
    iters: int = 10,
) -> list[Row]:
    nodes = [f"node-{r * 2 // world}" for r in range(world)]  # two nodes, half the ranks each
    out = []
    for i in range(sizes):
        m = samples(rng, world, iters, fabric, i, delay_us, throttle)
        out += [
            Row(job=0, step="bw", check="bandwidth", collective="all_reduce", size_bytes=8 << i,
                rank=r, node=nodes[r], world_size=world, samples_us=tuple(m[r]))
            for r in range(world)
        ]  # fmt: skip
    return out


def old_rule(rs: list[Row]) -> set[int]:
    """The straggler check before: last in >= 60% of iterations and >= 5 ms behind the median."""
    by_size: dict[int | None, dict[int, tuple[float, ...]]] = {}
    for r in rs:
        by_size.setdefault(r.size_bytes, {})[r.rank] = r.samples_us
    named: set[int] = set()
    for per_rank in by_size.values():
        m = np.array([per_rank[k] for k in sorted(per_rank)])
        last = np.bincount(m.argmin(axis=0), minlength=len(m)) / m.shape[1]
        late = np.median(np.median(m, axis=0) - m, axis=1) / 1000
        named |= {int(r) for r in np.flatnonzero((last >= 0.6) & (late >= 5.0))}
    return named


def bisect_named(
    rng: np.random.Generator, world: int, slow: dict[int, float], noise: float, spikes: float = 0.0
) -> set[int]:
    """The isolate check's decision on synthetic group times: a slow member slows its group.

    `spikes`: the chance that a load spike hits one group's measurement, making it 1.5-3x
    slower (a loaded host's burst of other work), on top of the Gaussian `noise`.
    """

    def time_of(g: tuple[int, ...]) -> float:
        spike = rng.uniform(1.5, 3.0) if rng.random() < spikes else 1.0
        slowest = max(slow.get(m, 1.0) for m in g)
        return 1000.0 * slowest * spike * (1 + noise * rng.standard_normal())

    def together(groups: list[tuple[int, ...]]) -> list[float | None]:
        return [1e6 / time_of(g) for g in groups]

    found = isolate(list(range(world)), None, 0.3, together=together, confirm=True)
    return {int(m) for m in found.flagged}


SPIKES = 0.15  # the spiky host: 15% of group measurements hit by a 1.5-3x load spike


@dataclass(frozen=True)
class Case:
    name: str
    fabric: Fabric
    world: int
    make: Callable[[np.random.Generator], list[Row]]
    truth: set[int]
    bisect_slow: dict[int, float] | None = None  # group slowdown per member, for bisection


CASES = [
    Case("clean, 4 ranks", GPU, 4, lambda g: rows(g, 4, GPU, {}), set(), {}),
    Case("clean, 8 ranks", GPU, 8, lambda g: rows(g, 8, GPU, {}), set(), {}),
    Case("clean, 4 ranks", CPU, 4, lambda g: rows(g, 4, CPU, {}), set(), {}),
    Case("clean, 8 ranks", CPU, 8, lambda g: rows(g, 8, CPU, {}), set(), {}),
    Case("delay 30 ms, rank 2 of 4", CPU, 4, lambda g: rows(g, 4, CPU, {2: 30_000}), {2}),
    Case("delay 1 ms, rank 2 of 4", CPU, 4, lambda g: rows(g, 4, CPU, {2: 1_000}), {2}),
    Case("delay 15 µs, rank 5 of 8", GPU, 8, lambda g: rows(g, 8, GPU, {5: 15.0}), {5}),
    Case("delay 5 µs, rank 5 of 8", GPU, 8, lambda g: rows(g, 8, GPU, {5: 5.0}), {5}),
    Case("slow node: 4 of 8 ranks, 5 ms", CPU, 8, lambda g: rows(g, 8, CPU, dict.fromkeys(range(4, 8), 5_000)), {4, 5, 6, 7}, dict.fromkeys(range(4, 8), 2.0)),
    Case("slow node: 4 of 8 ranks, 20 µs", GPU, 8, lambda g: rows(g, 8, GPU, dict.fromkeys(range(4, 8), 20.0)), {4, 5, 6, 7}, dict.fromkeys(range(4, 8), 1.6)),
    Case("throttle rank 1 of 4: 10 of 20 ms", CPU, 4, lambda g: rows(g, 4, CPU, {}, (1, 10_000, 20_000)), {1}, {1: 2.0}),
]  # fmt: skip


def tally(named: list[set[int]], truth: set[int]) -> tuple[int, int]:
    """(repeats naming a rank that is not a culprit, repeats not naming every culprit)."""
    false = sum(bool(n - truth) for n in named)
    missed = sum(not truth <= n for n in named) if truth else 0
    return false, missed


def synthetic(repeats: int) -> bool:
    print(f"synthetic, {repeats} seeded repeats per case (6 sizes x 10 iterations)")
    head = f"{'case':<36} {'fabric':<9} {'late_ranks_in_step false/miss':>22} {'old rule false/miss':>20} {'bisection false/miss':>21} {'spiky host':>11}"
    print(head)
    print("-" * len(head))
    clean_ok = True
    for case in CASES:
        new, old, bis, spiky = [], [], [], []
        for seed in range(repeats):
            rs = case.make(np.random.default_rng(seed))
            new.append({lr.rank for lr in late_ranks_in_step(rs)})
            old.append(old_rule(rs))
            if case.bisect_slow is not None:
                rng = np.random.default_rng(10_000 + seed)
                bis.append(bisect_named(rng, case.world, case.bisect_slow, 0.08))
                rng = np.random.default_rng(20_000 + seed)
                spiky.append(bisect_named(rng, case.world, case.bisect_slow, 0.08, SPIKES))
        f_new, m_new = tally(new, case.truth)
        f_old, m_old = tally(old, case.truth)
        b, sp = ("-" if not x else "{}/{}".format(*tally(x, case.truth)) for x in (bis, spiky))
        print(
            f"{case.name:<36} {case.fabric.name:<9} {f'{f_new}/{m_new}':>22} {f'{f_old}/{m_old}':>20} {b:>21} {sp:>11}"
        )
        if not case.truth and (f_new or any(x and tally(x, case.truth)[0] for x in (bis, spiky))):
            clean_ok = False
    return clean_ok


def real(repeats: int) -> None:
    """Real runs on an embedded Ray (4 CPU ranks, gloo): a bandwidth step, per fault kind."""
    import tempfile

    from fleetval.run.execute import run_suite
    from fleetval.store.dataset import Store
    from fleetval.suite import parse_suite

    step = {"name": "bw", "check": "bandwidth", "collectives": ["all_reduce"],
            "sizes": {"min": 1024, "max": 65536, "factor": 8}, "warmup": 2, "iters": 12}  # fmt: skip
    faults = {
        "clean": ([], set()),
        "delay 30 ms rank 2": ([{"kind": "delay", "rank": 2, "ms": 30}], {2}),
        "delay 1 ms rank 2": ([{"kind": "delay", "rank": 2, "ms": 1}], {2}),
    }
    print(f"\nreal: {repeats} runs per case, 4 ranks, gloo on CPU, embedded Ray")
    print(f"{'case':<24} {'false':>6} {'missed':>7} {'scores of the named ranks'}")
    store = Store(tempfile.mkdtemp(prefix="bench-lateness-"))
    for name, (fs, truth) in faults.items():
        named, scores = [], []
        for _ in range(repeats):
            spec = parse_suite({"name": "bench", "placement": {"world_sizes": [4], "gpus_per_rank": 0},
                                "steps": [step], "faults": fs})  # fmt: skip
            record = run_suite(spec, store)
            late = late_ranks_in_step(store.results([record.run_id]).to_pylist())
            named.append({lr.rank for lr in late})
            scores += [round(lr.score, 1) for lr in late]
        f, m = tally(named, truth)
        print(f"{name:<24} {f:>6} {m:>7} {scores if scores else '-'}")


def isolate_once(
    spec: object, store: object, victim: int | None
) -> tuple[set[int], set[int], float]:
    """One real `isolate` step, rank `victim` (None: nobody) throttled from outside
    (SIGSTOP 15 ms in every 20, as the tests do): (ranks flagged, throttled rank, seconds)."""
    import json
    import threading

    from fleetval.run.execute import run_suite
    from fleetval.testing.rayprocs import rank_pids, throttled

    ready, pick = threading.Event(), []

    def on_event(e: object) -> None:
        if victim is not None and e.kind == "step_start" and not pick:
            pick.append(rank_pids(4)[victim])
            ready.set()

    with throttled(ready, pick, stop_ms=15, period_ms=20):
        record = run_suite(spec, store, on_event=on_event)
    (step,) = record.summary["steps"]
    rows = [r for r in store.results([record.run_id]).to_pylist() if r["metric"] == "isolated"]
    rank_of = {json.loads(r["details"])["pid"]: r["rank"] for r in rows}
    flagged = {r["rank"] for r in rows if r["status"] == "fail"}
    return flagged, {rank_of[pick[0]]} if pick else set(), step["seconds"]


def real_isolation(repeats: int, seed: int = 0) -> None:
    """Real `isolate` steps on an embedded Ray (4 CPU ranks, gloo): clean, and one rank,
    picked at random, throttled from outside."""
    import random
    import tempfile

    from fleetval.store.dataset import Store
    from fleetval.suite import parse_suite

    rng = random.Random(seed)
    spec = parse_suite({"name": "bench", "placement": {"world_sizes": [4], "gpus_per_rank": 0},
                        "steps": [{"check": "isolate", "size": 16384, "warmup": 2}]})  # fmt: skip
    store = Store(tempfile.mkdtemp(prefix="bench-isolate-"))
    print(f"\nreal isolation: {repeats} runs per case, 4 ranks, gloo on CPU, embedded Ray")
    print(f"{'case':<28} {'false':>6} {'missed':>7} {'step seconds (median)':>22}")
    for case in ("clean", "throttle 15 of 20 ms"):
        runs = [
            isolate_once(spec, store, None if case == "clean" else rng.randrange(4))
            for _ in range(repeats)
        ]
        false = sum(bool(named - truth) for named, truth, _ in runs)
        missed = sum(not truth <= named for named, truth, _ in runs)
        seconds = float(np.median([s for _, _, s in runs]))
        print(f"{case:<28} {false:>6} {missed:>7} {seconds:>22.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--real", type=int, default=0, help="real Ray runs per case (0: none)")
    ap.add_argument(
        "--real-isolate", type=int, default=0, help="real isolate steps per case (0: none)"
    )
    args = ap.parse_args()
    ok = synthetic(args.repeats)
    if args.real:
        real(args.real)
    if args.real_isolate:
        real_isolation(args.real_isolate)
    print(
        "\n(false: repeats naming a rank that is not the culprit; miss: repeats not naming every culprit)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
