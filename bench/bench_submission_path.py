"""The same suite through `fleetval run` and through `fleetval serve` + `submit`: same figures?

    python bench/bench_submission_path.py [--suite smoke] [--pairs 6] [--size 2097152]

Starts `fleetval serve` on the embedded default (as a user would, no --address), then runs the
suite alternately through `fleetval run` (its own embedded Ray each time) and `fleetval submit
--wait` (the service's Ray and warm ranks), `--pairs` times each after one discarded run of
each (the service's first run starts its ranks). Per run: the median all_reduce busbw at
`--size` bytes over the ranks, and the CPU seconds each kind of process used while it ran
(sampled from /proc every 0.2 s, under the service or the command only: the ranks, the
service, the client or driver, Ray's own). Last, each
path's median and the ratio service / run with a bootstrap 95% interval: an interval that
holds 1 says the two paths measure alike within this machine's noise.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
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
        serve = subprocess.Popen([*fv, "serve", "--port", str(port), "--data", str(svc_data),
                                  "--no-access-log"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
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
                          + ("" if kept else "  (warm-up, not counted)"), flush=True)  # fmt: skip
        finally:
            serve.terminate()
            serve.wait(60)
    run, svc = figures["run"], figures["service"]
    lo, hi = ratio_interval(run, svc)
    print(f"\nall_reduce {human_bytes(size)} busbw, median of {args.pairs}: run {statistics.median(run):.3f}"
          f" GB/s, service {statistics.median(svc):.3f} GB/s; service / run "
          f"{statistics.median(svc) / statistics.median(run):.2f} (95% {lo:.2f} .. {hi:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
