"""The same suite through `fleetval run` and through `fleetval serve` + `submit`: same figures?

    python bench/bench_submission_path.py [--suite smoke] [--pairs 6] [--size 2097152]
                                          [--serve-nice N] [--serve-cpus 1] [--ray-start]

Starts `fleetval serve` on the embedded default (as a user would, no --address), then runs the
suite alternately through `fleetval run` (its own embedded Ray each time) and `fleetval submit
--wait` (the service's Ray and warm ranks), `--pairs` times each after one discarded run of
each (the service's first run starts its ranks). Per run: the median all_reduce busbw at
`--size` bytes over the ranks, and the CPU seconds each kind of process used while it ran
(sampled from /proc every 0.2 s, under the service or the command only: the ranks, the
service, the client or driver, Ray's own). Last, each
path's median and the ratio service / run with a bootstrap 95% interval: an interval that
holds 1 says the two paths measure alike within this machine's noise.

`--serve-nice` and `--serve-cpus` start the service as a service manager may (a unit's `Nice=`,
its `CPUAffinity=`, a container pinned to some cores) while `fleetval run` runs from this
process as it is: each run's line says what its ranks ran with (the node's fingerprint:
niceness, torch threads, the CPUs allowed, OMP_NUM_THREADS). `--ray-start` serves on a Ray
head started with `ray start --head` and Ray's defaults (as README's `serve --address` and an
operator's cluster: its workers at Ray's nice 15 unless RAY_worker_niceness=0 was set) instead
of the service's embedded Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import wait_ready

from fleetval.store.dataset import Store
from fleetval.testing.net import free_port
from fleetval.text import human_bytes

TCK = os.sysconf("SC_CLK_TCK")


def _cpu_table(roots: set[int]) -> dict[int, tuple[str, float]]:
    """The processes under `roots` (this benchmark's, not a neighbour's): (command line, CPU
    seconds so far)."""
    table, parent = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parent[int(entry)] = int(fields[1])
        table[int(entry)] = (cmd, (int(fields[11]) + int(fields[12])) / TCK)

    def under(pid: int) -> bool:
        while pid > 1:
            if pid in roots:
                return True
            pid = parent.get(pid, 0)
        return False

    return {pid: v for pid, v in table.items() if under(pid)}


def _kind(cmd: str) -> str | None:
    if "RankActor" in cmd:
        return "ranks"
    if "fleetval serve" in cmd:
        return "service"
    if "fleetval submit" in cmd or "fleetval run" in cmd:
        return "client"
    if any(k in cmd for k in ("raylet", "gcs_server", "ray::", "ray/")):
        return "ray"
    return None


def sampled(cmd: list[str], env: dict[str, str], service: int) -> dict[str, float]:
    """Run `cmd`; the CPU seconds each kind of process under it or the service used meanwhile."""
    first, last = _cpu_table({service}), {}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while proc.poll() is None:
        last.update(_cpu_table({service, proc.pid}))
        time.sleep(0.2)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.read()[-500:]}")
    used: dict[str, float] = {}
    for pid, (line, t) in last.items():
        kind = _kind(line)
        if kind:
            used[kind] = used.get(kind, 0.0) + t - first.get(pid, (line, 0.0))[1]
    return used


def busbw(data: Path, size: int) -> float:
    """The newest run's median all_reduce busbw at `size` over its ranks."""
    store = Store(data)
    run = store.runs()[-1].run_id
    rows = store.results([run], columns=["collective", "size_bytes", "busbw_gbps"]).to_pylist()
    return statistics.median(
        r["busbw_gbps"] for r in rows if r["collective"] == "all_reduce" and r["size_bytes"] == size
    )


def rank_settings(data: Path) -> str:
    """What the newest run's ranks ran with, as its node's fingerprint recorded it."""
    store = Store(data)
    run = store.runs()[-1].run_id
    nodes = [n for n in store.nodes().to_pylist() if n["run_id"] == run]
    extra = json.loads(nodes[0]["extra"] or "{}") if nodes else {}
    return (f"nice {extra.get('niceness', '?')} threads {extra.get('threads', '?')} "
            f"cpus {extra.get('cpus_allowed', '?')} "
            f"OMP {extra.get('env', {}).get('OMP_NUM_THREADS', '?')}")  # fmt: skip


def ratio_interval(a: list[float], b: list[float], n: int = 4000) -> tuple[float, float]:
    """Bootstrap 95% interval of median(b) / median(a)."""
    rng = random.Random(0)
    r = sorted(
        statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
        for _ in range(n)
    )
    return r[int(0.025 * n)], r[int(0.975 * n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="smoke")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--size", type=int, default=2 << 20, help="bytes")
    ap.add_argument("--serve-nice", type=int, default=0, help="the service's niceness")
    ap.add_argument("--serve-cpus", default="", help="the CPUs the service may use: 1 or 0,1")
    ap.add_argument("--ray-start", action="store_true", help="serve on a `ray start --head`")
    args = ap.parse_args()
    pinned = {int(c) for c in args.serve_cpus.split(",") if c}

    def as_a_service_manager_starts_it() -> None:
        os.nice(args.serve_nice)
        if pinned:
            os.sched_setaffinity(0, pinned)

    size = args.size
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    fv = [sys.executable, "-m", "fleetval"]
    with tempfile.TemporaryDirectory() as tmp:
        run_data, svc_data = Path(tmp) / "run", Path(tmp) / "svc"
        token = subprocess.run([*fv, "token", "create", "--scope", "submit", "--name", "bench",
                                "--data", str(svc_data)], env=env, capture_output=True,
                               text=True, check=True).stdout.split()[-1]  # fmt: skip
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        head, where, serve_env = None, [], env
        if args.ray_start:  # Ray's own defaults: no RAY_worker_niceness
            gcs = free_port()
            head_env = {k: v for k, v in env.items() if k != "RAY_worker_niceness"}
            said = Path(tmp) / "ray-start.log"
            with said.open("wb") as out:
                head = subprocess.Popen(["ray", "start", "--head", "--block", f"--port={gcs}",
                                         "--num-cpus=8", "--include-dashboard=false",
                                         f"--dashboard-port={free_port()}"], env=head_env,
                                        stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
            while "Ray runtime started" not in said.read_text() and head.poll() is None:
                time.sleep(0.5)
            ip = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
            where = ["--address", f"{ip[0]}:{gcs}"]
            serve_env = {**env, "RAY_AUTH_MODE": "token"}  # its token file (docs/deploy.md)
        serve = subprocess.Popen([*fv, "serve", "--port", str(port), "--data", str(svc_data),
                                  "--no-access-log", *where], env=serve_env,
                                 stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL,
                                 preexec_fn=as_a_service_manager_starts_it)  # fmt: skip
        try:
            wait_ready(url, serve, lambda r: r.json().get("status") == "ok", 120)
            submit = [*fv, "submit", args.suite, "--server", url, "--token", token, "--wait"]
            paths = {
                "run": ([*fv, "run", args.suite, "--data", str(run_data)], run_data),
                "service": (submit, svc_data),
            }
            figures: dict[str, list[float]] = {"run": [], "service": []}
            print(f"{'path':8} {'busbw GB/s':>10} {'s':>5}  CPU s: ranks service client ray")
            for i in range(args.pairs + 1):
                for name, (cmd, data) in paths.items():
                    t0 = time.monotonic()
                    cpu = sampled(cmd, env, serve.pid)
                    gbps = busbw(data, size)
                    kept = i > 0  # the first of each is a warm-up: the service starts its ranks
                    if kept:
                        figures[name].append(gbps)
                    print(f"{name:8} {gbps:10.3f} {time.monotonic() - t0:5.1f}  "
                          + " ".join(f"{cpu.get(k, 0):.2f}" for k in
                                     ("ranks", "service", "client", "ray"))
                          + f"  ranks: {rank_settings(data)}"
                          + ("" if kept else "  (warm-up, not counted)"), flush=True)  # fmt: skip
        finally:
            serve.terminate()
            serve.wait(60)
            if head is not None:
                head.terminate()  # `ray start --block` stops its processes with it
                head.wait(60)
    run, svc = figures["run"], figures["service"]
    lo, hi = ratio_interval(run, svc)
    for name, xs in (("run", run), ("service", svc)):
        print(
            f"{name:8} median {statistics.median(xs):.3f}  min {min(xs):.3f}  max {max(xs):.3f} GB/s"
        )
    print(f"\nall_reduce {human_bytes(size)} busbw, median of {args.pairs}: run {statistics.median(run):.3f}"
          f" GB/s, service {statistics.median(svc):.3f} GB/s; service / run "
          f"{statistics.median(svc) / statistics.median(run):.2f} (95% {lo:.2f} .. {hi:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
