"""The service under load, each figure beside a peer measured in the same run.

    python bench/bench_api.py [--seconds 10] [--connections 32] [--runs 3]

1. Requests per second of `GET /v1/runs/{id}` on one uvicorn worker, the load made by a
   second process (a keep-alive HTTP/1.1 client on raw asyncio streams, so the client is
   not the bottleneck); peer: `GET /healthz` (no token, no database: FastAPI's floor).
2. Time from a submission to its first collective on a warm service (the `step_start`
   event, received over SSE, and the first `step_progress`), and a run's whole time via
   the service; peer: the same suite with `fleetval run` (a fresh process and Ray).
   Warm vs cold start, paired: the service keeps the last job's rank actors
   (fleetval.run.pool), so each pair submits a suite whose job shape the pool does not hold
   (cold: the idle group freed, a new group and new actors) and then the same suite again
   (warm: the pooled actors, reset and pinged). The two shapes differ only in strategy.
3. p50 / p99 latency of `GET /v1/runs/{id}` while a run executes; peer: the idle service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from fleetval.testing.serve import executor_up, start_serve

SUITE = {
    "name": "bench-tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [
        {"check": "collectives", "collectives": ["all_reduce"], "dtypes": ["float32"], "repeats": 1}
    ],
}
OTHER = {
    **SUITE,
    "name": "bench-tiny-spread",
    "placement": {**SUITE["placement"], "strategy": "SPREAD"},
}
LONG = {  # keeps the executor busy while GET latency is measured
    "name": "bench-long",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [
        {
            "check": "bandwidth",
            "collectives": ["all_reduce"],
            "sizes": {"min": 8, "max": 4 * 1024 * 1024, "factor": 4},
            "warmup": 2,
            "iters": 30,
        }
    ],
}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetval.cli", *args], capture_output=True, text=True, check=True
    )


# -- load generator (runs in its own process) ---------------------------------------------


async def _worker(port: int, request: bytes, until: float, lat: list[float]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = 0
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode())
        lat.append(time.perf_counter() - t0)
        n += 1
    writer.close()
    return n


def _load(port: int, path: str, token: str, seconds: float, conns: int, out: mp.Queue) -> None:
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()

    async def main() -> tuple[int, list[float]]:
        until = time.perf_counter() + seconds
        lat: list[float] = []
        counts = await asyncio.gather(*[_worker(port, request, until, lat) for _ in range(conns)])
        return sum(counts), lat

    n, lat = asyncio.run(main())
    out.put((n / seconds, lat))


def load(port: int, path: str, token: str, seconds: float, conns: int) -> tuple[float, list[float]]:
    ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of this process's state
    q = ctx.Queue()
    p = ctx.Process(target=_load, args=(port, path, token, seconds, conns, q))
    p.start()
    result = q.get(timeout=seconds + 60)
    p.join(30)
    return result


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


# -- the service -----------------------------------------------------------------------


def submit_and_follow(client: httpx.Client, suite: dict) -> dict[str, float]:
    """Seconds from the POST to: 201, step_start (first collective next), first progress, end."""
    t0 = time.perf_counter()
    run_id = client.post("/v1/runs", json={"suite": suite}).json()["run_id"]
    marks = {"accepted": time.perf_counter() - t0}
    with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=300) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            kind = json.loads(line[6:])["kind"]
            name = {"step_start": "first_step", "step_progress": "first_progress"}.get(kind, kind)
            marks.setdefault(name, time.perf_counter() - t0)
            if kind == "run_end":
                break
    client.get(f"/v1/runs/{run_id}").json()
    marks["run_id"] = run_id  # type: ignore[assignment]
    return marks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="fleetval-bench-api-"))
    token = cli("token", "create", "--scope", "admin", "--data", str(data)).stdout.strip()
    serving = start_serve(data, "--no-access-log", ready=executor_up, timeout_s=120)
    port = serving.port
    client = httpx.Client(
        base_url=serving.url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    try:
        first = submit_and_follow(client, SUITE)  # warms Ray's workers; not reported
        warm = [submit_and_follow(client, SUITE) for _ in range(args.runs)]
        pairs = []  # (cold, warm): a shape the pool lacks, then the same shape again
        for i in range(args.runs):
            shape = (OTHER, SUITE)[i % 2]
            pairs.append((submit_and_follow(client, shape), submit_and_follow(client, shape)))
        t0 = time.perf_counter()
        for _ in range(args.runs):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fleetval.cli",
                    "run",
                    str(_suite_file(data)),
                    "--data",
                    str(data / "cli"),
                    "--json",
                ],
                capture_output=True,
                check=False,
            )
        cli_s = (time.perf_counter() - t0) / args.runs

        run_path = f"/v1/runs/{first['run_id']}"
        rps_run, lat_run = load(port, run_path, token, args.seconds, args.connections)
        rps_health, _ = load(port, "/healthz", token, args.seconds, args.connections)

        idle = _latencies(client, run_path, args.seconds / 2)
        busy_id = client.post("/v1/runs", json={"suite": LONG}).json()["run_id"]
        while client.get(f"/v1/runs/{busy_id}").json()["status"] == "queued":
            time.sleep(0.1)
        busy = _latencies(client, run_path, args.seconds / 2)
        busy_status = client.get(f"/v1/runs/{busy_id}").json()["status"]
    finally:
        serving.stop()
    _report(args, warm, cli_s, rps_run, lat_run, rps_health, idle, busy, busy_status)
    _report_pairs(pairs)


def _suite_file(data: Path) -> Path:
    path = data / "tiny.json"
    path.write_text(json.dumps(SUITE))
    return path


def _latencies(client: httpx.Client, path: str, seconds: float) -> list[float]:
    out, until = [], time.perf_counter() + seconds
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        client.get(path).raise_for_status()
        out.append(time.perf_counter() - t0)
    return out


def _report(args, warm, cli_s, rps_run, lat_run, rps_health, idle, busy, busy_status) -> None:
    med = lambda key: statistics.median(m[key] for m in warm)  # noqa: E731
    print(
        f"machine: {os.cpu_count()} cores; {args.runs} runs; load {args.seconds:g}s x {args.connections} connections"
    )
    print("\n| figure | service | peer |\n|---|---:|---:|")
    print(
        f"| GET /v1/runs/{{id}} req/s (one worker) vs GET /healthz | {rps_run:,.0f} | {rps_health:,.0f} |"
    )
    print(
        f"| ... p50 / p99 ms under that load | {pct(lat_run, 0.5):.1f} / {pct(lat_run, 0.99):.1f} | |"
    )
    print(f"| submit -> 201 (ms) | {1000 * med('accepted'):.1f} | |")
    print(f"| submit -> step_start: first collective next (s) | {med('first_step'):.2f} | |")
    print(
        f"| submit -> run_end (s) vs `fleetval run` wall (s) | {med('run_end'):.2f} | {cli_s:.2f} |"
    )
    print(
        f"| GET p50 / p99 ms while a run executes ({busy_status}) vs idle | {pct(busy, 0.5):.1f} / {pct(busy, 0.99):.1f} | {pct(idle, 0.5):.1f} / {pct(idle, 0.99):.1f} |"
    )


def _report_pairs(pairs: list[tuple[dict, dict]]) -> None:
    print(
        "\n| pair | cold: submit -> first collective (s) | warm (s) | cold run_end (s) | warm run_end (s) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for i, (cold, warm) in enumerate(pairs):
        print(
            f"| {i} | {cold['first_step']:.2f} | {warm['first_step']:.2f} | {cold['run_end']:.2f} | {warm['run_end']:.2f} |"
        )
    med = lambda side, key: statistics.median(p[side][key] for p in pairs)  # noqa: E731
    print(
        f"| median | {med(0, 'first_step'):.2f} | {med(1, 'first_step'):.2f} | {med(0, 'run_end'):.2f} | {med(1, 'run_end'):.2f} |"
    )


if __name__ == "__main__":
    main()
