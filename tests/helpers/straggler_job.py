"""A real DDP training job on CPU (gloo) that writes what production jobs write: per-rank step
logs and a PyTorch Flight Recorder dump per rank. One rank can be made late for a window of
steps, from inside the loop (a sleep) or from outside (SIGSTOP/SIGCONT bursts sent by the
parent), or killed at a step (the others' dumps are then cut short and its own is missing).

    python -m tests.helpers.straggler_job OUT --ranks 4 --steps 60 \
        [--late RANK --window 20:30 --sleep 0.05 | --sigstop RANK --window 20:30] \
        [--kill RANK --at 40] [--format pickle|json] [--seed 0] [--width 128 --batch 32]

Writes OUT/logs/rank<R>.log (`[2026-11-28 21:10:49.123] [node-0 Rank 0] epoch=0 step=12,
loss=..., elapsed=...s, dt=...s`) and OUT/dumps/node-<R // 2>/fr_rank_<R>[.json], the bytes
`torch._C._distributed_c10d._dump_fr_trace()` / `_dump_fr_trace_json()` return (stack traces
left out, as `includeStackTraces=False`). Flight Recorder is switched on the way a job does
it: TORCH_FR_BUFFER_SIZE in the environment before the process group starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
import time
from datetime import datetime
from pathlib import Path

RANKS_PER_HOST = 2


def _host(rank: int) -> str:
    return f"node-{rank // RANKS_PER_HOST}"


def _dump(out: Path, rank: int, fmt: str) -> None:
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    folder = out / "dumps" / _host(rank)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        (folder / f"fr_rank_{rank}.json").write_bytes(_dump_fr_trace_json())
    else:
        (folder / f"fr_rank_{rank}").write_bytes(_dump_fr_trace(includeStackTraces=False))


def _rank_main(rank: int, a: argparse.Namespace, port: int, step_now: object) -> None:
    import datetime as dt_mod

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks,
        timeout=dt_mod.timedelta(seconds=20),
    )  # fmt: skip
    torch.manual_seed(a.seed)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(64, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, 8)
        ),
        bucket_cap_mb=0.02,  # NOTE: a few buckets, so each step is several all_reduces
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(a.seed + rank)
    first, last = (int(x) for x in a.window.split(":")) if a.window else (-1, -2)
    log = (Path(a.out) / "logs" / f"rank{rank}.log").open("w", buffering=1)
    start = prev = time.time()
    try:
        for step in range(1, a.steps + 1):
            if rank == 0:
                step_now.value = step  # type: ignore[attr-defined]
            if rank == a.kill and step == a.at:
                log.close()
                os._exit(9)  # NOTE: killed: no dump, the peers' records stop here
            if rank == a.late and first <= step <= last:
                time.sleep(a.sleep)  # the late rank's extra work before its collectives
            x = torch.randn(a.batch, 64, generator=gen)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            dist.all_reduce(loss.detach())  # the loss every rank logs
            now = time.time()
            stamp = datetime.fromtimestamp(now).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            log.write(
                f"[{stamp}] [{_host(rank)} Rank {rank}] epoch=0 step={step}, "
                f"loss={loss.item():.4f}, elapsed={now - start:.3f}s, dt={now - prev:.4f}s\n"
            )
            prev = now
    except Exception as err:  # a peer died: dump what was recorded, as on a watchdog timeout
        log.write(f"error: {type(err).__name__}: {err}\n")
    _dump(Path(a.out), rank, a.format)
    log.close()
    os._exit(0)  # NOTE: a peer may be gone; destroy_process_group would wait for it


def _stopper(pid: int, a: argparse.Namespace, step_now: object, done: threading.Event) -> None:
    """SIGSTOP bursts to one rank while rank 0 is inside the window: the straggler made from
    outside the job, as a noisy neighbour or a throttled CPU makes one."""
    first, last = (int(x) for x in a.window.split(":"))
    while not done.is_set():
        if first <= step_now.value <= last:  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGSTOP)
            time.sleep(a.sleep)
            os.kill(pid, signal.SIGCONT)
        time.sleep(a.sleep)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--late", type=int, default=-1)
    p.add_argument("--sigstop", type=int, default=-1)
    p.add_argument("--window", default="")
    p.add_argument("--sleep", type=float, default=0.05)
    p.add_argument("--kill", type=int, default=-1)
    p.add_argument("--at", type=int, default=-1)
    p.add_argument("--format", choices=("pickle", "json"), default="pickle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=128, help="hidden width: the compute per step")
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args(argv)
    os.environ["TORCH_FR_BUFFER_SIZE"] = "20000"  # switch Flight Recorder on
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    (Path(a.out) / "logs").mkdir(parents=True, exist_ok=True)
    import multiprocessing as mp

    import torch  # noqa: F401  NOTE: imported once here, shared by the forked ranks

    ctx = mp.get_context("fork")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    step_now = ctx.Value("i", 0)
    procs = [ctx.Process(target=_rank_main, args=(r, a, port, step_now)) for r in range(a.ranks)]
    for proc in procs:
        proc.start()
    done = threading.Event()
    if a.sigstop >= 0:
        pid = procs[a.sigstop].pid
        threading.Thread(target=_stopper, args=(pid, a, step_now, done), daemon=True).start()
    for proc in procs:
        proc.join(timeout=120)
    done.set()
    for proc in procs:
        if proc.is_alive() and proc.pid:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()


if __name__ == "__main__":
    main()
