"""The rank actor's GPU paths that a CPU can show: device ids as Ray gives them, binding a
GPU rank where torch sees none, the current device per thread, the allocator cache at reset,
and a pooled rank's evidence (its NCCL log window, its Flight Recorder entries) per job."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

from fleetval.checks.base import RankContext
from fleetval.checks.health import rank as health
from fleetval.run import flightrec
from fleetval.run import rank as rank_mod
from fleetval.run.job import rank_env
from fleetval.run.rank import (
    DeviceBindingError,
    Placed,
    RankActor,
    assigned_gpus,
    bind_device,
    device_index,
)
from fleetval.testing.net import free_port

ROOT = Path(__file__).resolve().parents[2]


def ctx(device: str = "cpu", backend: str = "gloo", rank: int = 0, world: int = 1) -> RankContext:
    return RankContext(run_id="r", job=0, rank=rank, world_size=world, local_rank=rank,
                       local_world_size=world, node="node-a", node_rank=0, backend=backend,
                       device=device, device_id=None, seed=0)  # fmt: skip


# ---- device ids (item 4) ---------------------------------------------------------------------


def test_ray_gpu_ids_stay_text_uuids_included():
    assert assigned_gpus(["GPU-5e7c1d2a-0b1f", "MIG-9a8b", 3]) == (
        "GPU-5e7c1d2a-0b1f",
        "MIG-9a8b",
        "3",
    )


def test_a_uuid_visible_list_binds_the_uuids_position():
    visible = "GPU-aaaa,GPU-bbbb"
    assert device_index(visible, assigned_gpus(["GPU-bbbb"]), 2) == 1


def test_a_uuid_with_nothing_narrowing_is_refused_not_a_value_error():
    with pytest.raises(DeviceBindingError, match="Ray assigned GPU GPU-bbbb, but no visible"):
        device_index(None, ("GPU-bbbb",), 8)


def test_ranks_order_by_gpu_number_then_uuid():
    def placed(*ids: str) -> Placed:
        return Placed("n", "id", "10.0.0.1", "h", ids, "cuda:0", None)

    got = sorted([placed("10"), placed("GPU-a"), placed("2")], key=lambda p: p.gpu_order)
    assert [p.gpu_ids for p in got] == [("2",), ("10",), ("GPU-a",)]


# ---- a GPU rank without a usable GPU (item 3) ------------------------------------------------


def bind(**kw):
    args = dict(wants_gpu=True, node="gpu-7", gpu_ids=("3",), cuda_available=False,
                gpu_device_files=True, visible="3", device_count=0,
                torch_build="torch 2.13.0+cpu, built for CUDA None, HIP None")  # fmt: skip
    return bind_device(**(args | kw))


def test_a_gpu_rank_on_a_gpu_node_where_torch_sees_none_raises_naming_the_node():
    with pytest.raises(DeviceBindingError) as err:
        bind()
    assert str(err.value) == (
        "node gpu-7: Ray gave this rank GPU 3, the node has GPU devices, but torch cannot use "
        "any (torch 2.13.0+cpu, built for CUDA None, HIP None)"
    )


def test_gpus_declared_to_ray_only_run_on_cpu_and_cpu_ranks_bind_nothing():
    assert bind(gpu_device_files=False) is None  # a simulated node: no GPU device file
    assert bind(wants_gpu=False) is None
    assert bind(cuda_available=True, device_count=1) == 0


# ---- the current device per thread (item 2) and the cache at reset (item 11) -----------------


def test_run_step_binds_the_device_on_the_thread_that_runs_it(monkeypatch):
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(
        torch.cuda, "set_device", lambda d: calls.append((threading.get_ident(), str(d)))
    )
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    seen: list[list[tuple[int, str]]] = []

    class Check:
        def run(self, c, step):
            seen.append(list(calls))
            return []

    monkeypatch.setitem(rank_mod.CHECKS, "probe", Check())
    actor = RankActor(1)
    actor._ctx = ctx("cuda:1")
    step = types.SimpleNamespace(check="probe", step_name="s")
    worker = threading.Thread(target=actor.run_step, args=(step, ()))
    worker.start()
    worker.join()
    assert seen == [[(worker.ident, "cuda:1")]]  # bound on that thread, before the check ran


def test_reset_returns_the_allocators_cached_blocks(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    RankActor(0).reset()
    assert emptied == [True]


# ---- a pooled rank's NCCL log (item 7) ---------------------------------------------------------


def test_a_pooled_ranks_second_job_reads_its_own_part_of_the_one_nccl_log(tmp_path, monkeypatch):
    """NCCL opens NCCL_DEBUG_FILE once per process: the second job's lines land in the first
    job's file, after what the first job wrote, and the health check reads only them."""
    monkeypatch.delenv(health.NCCL_LOG_VAR, raising=False)
    monkeypatch.delenv(health.NCCL_LOG_OFFSET_VAR, raising=False)
    first = tmp_path / "job0" / "nccl.%h.%p.log"
    actor = RankActor(0)
    actor._ctx = ctx("cpu", "nccl")
    actor._set_env({"NCCL_DEBUG_FILE": str(first)})
    actor._mark_nccl_log()
    log = Path(os.environ[health.NCCL_LOG_VAR])
    assert log.parent == first.parent and os.environ[health.NCCL_LOG_OFFSET_VAR] == "0"
    log.parent.mkdir(parents=True)
    log.write_text("h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
                   "h:1:1 [0] NCCL INFO Using network Socket\n")  # fmt: skip
    actor.reset()
    assert health.NCCL_LOG_VAR not in os.environ
    actor._ctx = ctx("cpu", "nccl")
    actor._set_env({"NCCL_DEBUG_FILE": str(tmp_path / "job1" / "nccl.%h.%p.log")})
    actor._mark_nccl_log()
    assert os.environ[health.NCCL_LOG_VAR] == str(log)  # still the file NCCL has open
    with log.open("a") as f:
        f.write("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n"
                "h:1:1 [0] NCCL INFO Using network IB\n")  # fmt: skip
    summary, _ = health._nccl_log(types.SimpleNamespace(rank=ctx("cpu", "nccl")))
    assert summary is not None and summary.network == "IB"
    actor.reset()


# ---- the NCCL version in use (item 9) --------------------------------------------------------


def test_min_nccl_version_is_judged_on_the_loaded_library(monkeypatch):
    monkeypatch.setattr(health.environment, "runtime_collective_version",
                        lambda: ("2.28.9", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"))  # fmt: skip
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    from fleetval.checks.base import CheckContext, Heartbeat
    from fleetval.checks.health.params import HealthParams

    c = CheckContext(ctx("cuda:0", "nccl"), "h", (), Heartbeat())
    p = HealthParams(check="health", min_nccl_version="2.26")
    f = health._version(c, None, p, rocm=False)
    assert (f.status.value, f.reason) == ("pass", "NCCL 2.28.9 >= 2.26")


def test_the_version_in_use_falls_back_to_the_log_then_the_header():
    assert health.collective_version_in_use(None, "2.21.5", None) == "2.21.5"
    assert health.collective_version_in_use("2.28.9", "2.21.5", None) == "2.28.9"


# ---- the Flight Recorder on pooled ranks (items 7, 8, 13) ------------------------------------


def test_both_flight_recorder_buffer_sizes_are_set_for_an_nccl_job(monkeypatch):
    """TORCH_FR_BUFFER_SIZE since torch 2.9, TORCH_NCCL_TRACE_BUFFER_SIZE before it."""
    for var in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        monkeypatch.delenv(var, raising=False)
    job = types.SimpleNamespace(backend="nccl", index=0)  # rank_env reads these two fields
    env = rank_env("run", job, "10.0.0.1")  # type: ignore[arg-type]
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"


JOB = """
import os, sys, time
import torch.multiprocessing as mp

def rank_main(rank, ports, out):
    import torch, torch.distributed as dist
    from fleetval.checks.base import RankContext
    from fleetval.run.rank import RankActor
    actor = RankActor(0)
    env = {"TORCH_FR_BUFFER_SIZE": "200", "GLOO_SOCKET_IFNAME": "lo"}
    def ctx(job):
        return RankContext(run_id="fr", job=job, rank=rank, world_size=2, local_rank=rank,
                           local_world_size=2, node="local", node_rank=0, backend="gloo",
                           device="cpu", device_id=None, seed=0)
    t = torch.ones(8)
    actor.join(ctx(0), "127.0.0.1", ports[0], 30, env)  # the pool's first job: 5 collectives
    for _ in range(5):
        dist.all_reduce(t)
    actor.reset()
    actor.join(ctx(1), "127.0.0.1", ports[1], 30, env)  # the same processes, the next job
    for _ in range(2):
        dist.all_reduce(t)
    if rank == 0:
        dist.all_reduce(t, async_op=True)  # rank 1 never enters this one
        time.sleep(0.5)
    with open(os.path.join(out, f"rank{rank}.trace"), "wb") as f:
        f.write(actor.flight_recorder())
    os._exit(0)

if __name__ == "__main__":
    ports = [int(sys.argv[1]), int(sys.argv[2])]
    mp.start_processes(rank_main, args=(ports, sys.argv[3]), nprocs=2, start_method="spawn")
"""


@pytest.fixture(scope="module")
def pooled_gloo_traces(tmp_path_factory) -> dict[int, bytes]:
    """Two gloo ranks run two jobs on the same processes (as a pool reuses them); each rank's
    Flight Recorder trace is taken after the second, where rank 1 skipped the last collective."""
    out = tmp_path_factory.mktemp("fr")
    script = out / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, str(script), str(free_port()), str(free_port()), str(out)],
                   check=True, timeout=120, env=env, cwd=ROOT, capture_output=True)  # fmt: skip
    return {r: (out / f"rank{r}.trace").read_bytes() for r in (0, 1)}


def test_a_pooled_ranks_trace_holds_only_its_current_jobs_entries(pooled_gloo_traces):
    dumps = {r: pickle.loads(t) for r, t in pooled_gloo_traces.items()}
    seqs = {r: [e["collective_seq_id"] for e in d["entries"]] for r, d in dumps.items()}
    assert seqs == {0: [1, 2, 3], 1: [1, 2]}  # not the first job's 1..5 before them
    (m,) = flightrec.missing(dumps)
    assert (m.seq, m.collective, m.ranks) == (3, "gloo:all_reduce", (1,))


def test_torchs_analyser_is_fed_the_pickles_and_names_the_missing_rank(pooled_gloo_traces):
    class Handle:
        def __init__(self, rank: int) -> None:
            self.rank = rank

    from fleetval.culprit import Culprit

    culprit = Culprit(1, "local", None, "hang", "fell behind")
    (out,) = flightrec.confirm([culprit], pooled_gloo_traces, [Handle(0), Handle(1)])
    assert "rank 1 missing from gloo:all_reduce #3 (group 0)" in out.detail
    assert "torch analyser: rank 1 missing from gloo:all_reduce #3" in out.detail


def test_when_torchs_analyser_cannot_run_the_detail_says_so(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_analyser(name, *a, **kw):
        if name.startswith("torch.distributed.flight_recorder"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_analyser)
    (line,) = flightrec.torch_verdict({0: {"version": "2.10", "pg_config": {}, "entries": []}})
    assert line.startswith("torch's analyser not run: this torch lacks it")


# ---- which recorder holds a backend's collectives (found on the first GPU contact) -----------

GPU_DATA = ROOT / "tests" / "data" / "gpu"


def test_the_generic_recorder_after_an_nccl_job_holds_nothing_and_reads_as_no_entries():
    """Real dumps of torch 2.11's generic recorder after three NCCL all_reduces (H200): no
    entries (and no `entries` key in the JSON), so nothing can be missing in them."""
    for name in ("generic-recorder-after-nccl.pickle", "generic-recorder-after-nccl.json"):
        dump = flightrec.load((GPU_DATA / name).read_bytes())
        assert dump["entries"] == [] and dump["version"] == "2.10", name
        assert flightrec.missing({0: dump, 1: dump}) == []


def test_an_nccl_rank_reads_the_cuda_recorder_and_a_gloo_rank_the_generic_one(monkeypatch):
    """NCCL's entries are in `_dump_nccl_trace` (absent from a CPU wheel, so stood in for here);
    a gloo rank's are in `_dump_fr_trace`, read for real from a one-rank gloo group."""
    from torch._C import _distributed_c10d as c10d

    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "100")
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda **_: b"nccl recorder", raising=False)
    assert rank_mod._fr_dump("nccl", stacks=False) == b"nccl recorder"
    actor = RankActor(1)
    actor.join(ctx(), "127.0.0.1", free_port(), 30, {"TORCH_FR_BUFFER_SIZE": "100"})
    try:
        import torch.distributed as dist

        dist.all_reduce(torch.ones(4))
        dump = flightrec.load(rank_mod._fr_dump("gloo", stacks=False) or b"{}")
        assert [e["profiling_name"] for e in dump["entries"]][-1:] == ["gloo:all_reduce"]
    finally:
        actor.reset()
