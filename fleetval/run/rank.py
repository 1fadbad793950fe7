"""The rank actor: thin. Binds its device, joins the process group, runs one check at a time.

The executor wraps this class with `ray.remote(max_concurrency=2)` so `progress()` is
answered from a second thread while a check blocks the first inside a collective.
"""

from __future__ import annotations

import gc
import glob
import ipaddress
import os
import socket
import time
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import ray

from fleetval.checks import CHECKS
from fleetval.checks.base import ActiveFault, CheckContext, Heartbeat, Progress, RankContext
from fleetval.checks.spec import StepSpec
from fleetval.run import flightrec
from fleetval.run.plan import NODE_LABEL
from fleetval.run.ranksettings import RankSettings
from fleetval.run.ranksettings import apply as apply_settings
from fleetval.store.schema import Row

if TYPE_CHECKING:
    import torch.distributed as dist


@dataclass(frozen=True)
class Placed:
    """Where Ray put an actor: enough for the driver to order ranks by node, then GPU id."""

    node: str
    node_id: str
    node_ip: str
    hostname: str
    gpu_ids: tuple[str, ...]  # as Ray lists them: "3", or "GPU-<uuid>" / "MIG-<uuid>"
    device: str
    device_id: str | None
    pid: int = 0  # the rank process: what an operator (or a test) stops or kills

    @property
    def gpu_order(self) -> tuple[tuple[int, int, str], ...]:
        """Sort key: numeric ids in numeric order ("10" after "2"), UUIDs after them."""
        return tuple((0, int(g), "") if g.isdigit() else (1, 0, g) for g in self.gpu_ids)


def assigned_gpus(raw: Sequence[int | str]) -> tuple[str, ...]:
    """Ray's GPU ids as text: `ray.get_gpu_ids()` gives the node's CUDA_VISIBLE_DEVICES entries,
    which are UUIDs (`GPU-...`, `MIG-...`) on many nodes, never to be read as numbers."""
    return tuple(str(g).strip() for g in raw)


def has_gpu_device() -> bool:
    """Whether this node has a GPU device file (NVIDIA's /dev/nvidiaN, AMD's /dev/kfd)."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def _device_id(index: int) -> str | None:
    """The physical GPU's UUID (else PCI bus id), so a bad GPU is named, not just a rank."""
    import torch  # NOTE: torch only in the actor's process: the driver imports this module

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return f"GPU-{uuid}"
    bus = getattr(props, "pci_bus_id", None)
    return f"pci:{bus}" if bus is not None else None


class DeviceBindingError(RuntimeError):
    """The GPU Ray assigned to this rank is not one this process can use."""


def hip_visibility(env: MutableMapping[str, str], rocm: bool) -> None:
    """On ROCm, narrow GPUs with HIP_VISIBLE_DEVICES alone: a lone ROCR_VISIBLE_DEVICES moves there.

    NOTE: Ray before 2.45 narrowed actors with ROCR_VISIBLE_DEVICES, by which torch before 2.6
    did not count devices (ray-project/ray#46563); Ray since then narrows with HIP and refuses a
    lone ROCR. With HIP unset both list the same physical ids, so the move changes nothing the
    GPU runtime sees, and torch, Ray and `device_index` then read one variable.
    """
    rocr = env.get("ROCR_VISIBLE_DEVICES", "")
    ids = [i.strip() for i in rocr.split(",")]
    if rocm and rocr and not env.get("HIP_VISIBLE_DEVICES") and all(i.isdigit() for i in ids):
        env["HIP_VISIBLE_DEVICES"] = env.pop("ROCR_VISIBLE_DEVICES")


def visible_devices_var() -> str:
    """The variable Ray restricts this process's GPUs with (HIP/ROCR on ROCm builds of torch)."""
    import torch

    if getattr(torch.version, "hip", None):
        return next(
            (v for v in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if os.environ.get(v)),
            "HIP_VISIBLE_DEVICES",
        )
    return "CUDA_VISIBLE_DEVICES"


def device_index(visible: str | None, gpu_ids: Sequence[int | str], device_count: int) -> int:
    """This rank's device index among the GPUs the process sees.

    Ray lists the physical ids it assigned (`ray.get_gpu_ids()`) and normally narrows the
    visible devices to exactly those, so the index is their position in the visible list;
    where nothing narrows them (RAY_EXPERIMENTAL_NOSET_*_VISIBLE_DEVICES), it is the physical
    id itself. Either way it must be below torch's device_count.
    """
    if not gpu_ids:
        raise DeviceBindingError("this rank asked for a GPU but Ray assigned none")
    wanted = str(gpu_ids[0])
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if wanted not in ids:
            raise DeviceBindingError(
                f"Ray assigned GPU {wanted}, but the visible devices are {visible}"
            )
        index = ids.index(wanted)
    elif wanted.isdigit():
        index = int(wanted)
    else:
        raise DeviceBindingError(
            f"Ray assigned GPU {wanted}, but no visible-devices variable lists it to find its index"
        )
    if index >= device_count:
        raise DeviceBindingError(
            f"GPU {wanted} is device index {index}, but torch sees {device_count} device(s)"
            f" (visible devices: {visible or 'all'})"
        )
    return index


def bind_device(
    *,
    wants_gpu: bool,
    node: str,
    gpu_ids: Sequence[str],
    cuda_available: bool,
    gpu_device_files: bool,
    visible: str | None,
    device_count: int,
    torch_build: str = "",
) -> int | None:
    """This rank's device index, or None for a CPU rank.

    A rank that asked for a GPU on a node that has GPUs, where torch sees none (a CPU build of
    torch, a driver torch cannot use), raises naming the node: it would otherwise measure the
    CPU (gloo) or fail every rank's NCCL init with no culprit. A node without any GPU device
    file declares its GPUs to Ray only (a simulated cluster): its ranks run on CPU.
    """
    if not wants_gpu:
        return None
    if not cuda_available:
        if not gpu_device_files:
            return None
        ids = ", ".join(gpu_ids) or "none"
        raise DeviceBindingError(
            f"node {node}: Ray gave this rank GPU {ids}, the node has GPU devices, but torch "
            f"cannot use any ({torch_build or 'torch.cuda.is_available() is false'})"
        )
    return device_index(visible, gpu_ids, device_count)


FR_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch >= 2.9, older


def _fr_dump(backend: str, *, stacks: bool) -> bytes | None:
    """This process's Flight Recorder buffer for `backend`, pickled (what torch's analyser reads).

    NOTE: torch keeps two recorders. NCCL's collectives go to the CUDA one, `_dump_nccl_trace`;
    `_dump_fr_trace` is the generic one (gloo, CPU), which on a GPU host holds none of NCCL's
    entries (0 entries from a one-rank NCCL group on torch 2.11, H200, bench/RESULTS.md). A CPU
    wheel has no NCCL symbol, so only a GPU run can tell them apart."""
    from torch._C import _distributed_c10d as c10d

    names = ("_dump_nccl_trace", "_dump_fr_trace") if backend == "nccl" else ("_dump_fr_trace",)
    for name in names:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            out = dump(includeCollectives=True, includeStackTraces=stacks, onlyActive=False)
        except (RuntimeError, TypeError):  # built without the recorder, or its buffer is off
            return None
        return out.encode() if isinstance(out, str) else out
    return None


def init_process_group(ctx: RankContext, master: str, port: int, timeout_s: float) -> None:
    """The one place the process group is formed: TCP rendezvous on rank 0's address."""
    import torch
    import torch.distributed as dist

    if ctx.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(ctx.device))
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend=ctx.backend,
        store=rendezvous_store(ctx, master, port, timeout),
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timeout,
        # NOTE: binds NCCL communicators to this device eagerly, so a bad GPU fails here.
        device_id=torch.device(ctx.device) if ctx.backend == "nccl" else None,
    )


def rendezvous_store(ctx: RankContext, master: str, port: int, timeout: timedelta) -> dist.Store:
    """The group's TCP store, served by rank 0 on `master`:`port`.

    NOTE: a TCPStore server listens on every interface; on a loopback master (the embedded
    instance) it is handed a socket bound to loopback instead, so nothing of a local run is
    reachable from the network. A taken port raises "Address already in use" (the driver
    retries with another).
    """
    import torch.distributed as dist  # NOTE: torch only in the actor's process

    serve = ctx.rank == 0
    listen_fd = None
    if serve and ipaddress.ip_address(master).is_loopback:
        listen_fd = socket.create_server((master, port)).detach()  # the store owns it now
    return dist.TCPStore(
        master, port, ctx.world_size, serve, timeout, master_listen_fd=listen_fd, use_libuv=True
    )


class RankActor:
    """One rank of one job; lives as long as the job's placement group (or, pooled, as long
    as the pool keeps the group: reset between jobs)."""

    def __init__(self, gpus_per_rank: float, settings: RankSettings | None = None) -> None:
        self._heartbeat = Heartbeat()
        self._ctx: RankContext | None = None
        self._wants_gpu = gpus_per_rank > 0
        self._env_before: dict[str, str | None] = {}  # what join() changed, for reset()
        self._fr_mark = -1  # the recorder's last record id before this job
        self._nccl_log: str | None = None  # the file NCCL logs to in this process
        # NOTE: importing torch makes ~155,000 objects the collector tracks, which live as long
        # as the process: its passes over them took ~7% of a rank's start, and every full pass
        # of the rank's life would scan them again. Frozen, none of them is scanned.
        gc.disable()
        if settings is not None:  # from its start (torch's import too), not from join on
            apply_settings(settings)
        import torch

        gc.freeze()
        gc.enable()

        # before torch first touches the GPU runtime, which reads the variables once
        hip_visibility(os.environ, rocm=bool(getattr(torch.version, "hip", None)))

    def describe(self) -> Placed:
        """Where this actor runs and which device it binds; raises if its GPU is unusable."""
        rt = ray.get_runtime_context()
        gpu_ids = assigned_gpus(ray.get_gpu_ids())
        node = rt.get_node_labels().get(NODE_LABEL) or socket.gethostname()
        device, device_id = "cpu", None
        import torch

        available = torch.cuda.is_available()
        index = bind_device(
            wants_gpu=self._wants_gpu,
            node=node,
            gpu_ids=gpu_ids,
            cuda_available=available,
            gpu_device_files=not available and has_gpu_device(),
            visible=os.environ.get(visible_devices_var()),
            device_count=torch.cuda.device_count() if available else 0,
            torch_build=f"torch {torch.__version__}, built for CUDA {torch.version.cuda}, "
            f"HIP {getattr(torch.version, 'hip', None)}",
        )
        if index is not None:
            device, device_id = f"cuda:{index}", _device_id(index)
        return Placed(
            node=node,
            node_id=rt.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            hostname=socket.gethostname(),
            gpu_ids=gpu_ids,
            device=device,
            device_id=device_id,
            pid=os.getpid(),
        )

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def join(
        self,
        ctx: RankContext,
        master: str,
        port: int,
        timeout_s: float,
        env: dict[str, str],
        settings: RankSettings | None = None,
    ) -> None:
        """Join the job's process group, this process first put at the job's `settings`
        (priority, threads, CPUs: not what the process that started Ray happened to have)."""
        if settings is not None:  # again: a pooled rank's threads and env since its start
            apply_settings(settings)
        self._set_env(env)
        for var in ("TORCH_FR_DUMP_TEMP_FILE", "NCCL_DEBUG_FILE"):
            if env.get(var):  # NCCL and the recorder write there, but never make the folder
                os.makedirs(os.path.dirname(env[var]), exist_ok=True)
        self._ctx = ctx
        # NOTE: both are per process, and a pooled actor joins many jobs: the recorder keeps
        # earlier jobs' entries (under the same group name) and NCCL opens its debug file once.
        # This job's evidence is what comes after these marks.
        self._fr_mark = flightrec.last_record(_fr_dump(ctx.backend, stacks=False))
        if ctx.backend == "nccl":
            self._mark_nccl_log()
        self._heartbeat.set(phase="rendezvous")
        init_process_group(ctx, master, port, timeout_s)
        self._heartbeat.set(phase="ready")

    def _set_env(self, env: dict[str, str]) -> None:
        """Set variables for this job, remembering what they were for reset()."""
        self._env_before |= {k: os.environ.get(k) for k in env if k not in self._env_before}
        os.environ.update(env)

    def _mark_nccl_log(self) -> None:
        """Where NCCL writes this process's log, and how long it is before this job."""
        from fleetval.checks.health.rank import NCCL_LOG_OFFSET_VAR, NCCL_LOG_VAR, nccl_log_path

        if self._nccl_log is None:  # NCCL opens the file at its first init: it stays that one
            raw = os.environ.get("NCCL_DEBUG_FILE")
            self._nccl_log = nccl_log_path(raw, os.getpid()) if raw else None
        if self._nccl_log is not None:
            size = os.path.getsize(self._nccl_log) if os.path.isfile(self._nccl_log) else 0
            self._set_env({NCCL_LOG_VAR: self._nccl_log, NCCL_LOG_OFFSET_VAR: str(size)})

    def _on_device(self) -> None:
        """Make this rank's GPU the current device of the calling thread.

        NOTE: the current device is per thread, and Ray runs this actor's calls on two
        (max_concurrency=2): a call on the thread that did not join would put CUDA events and
        object-collective tensors on cuda:0 beside a communicator bound to cuda:k."""
        if self._ctx is not None and self._ctx.device.startswith("cuda"):
            import torch

            torch.cuda.set_device(torch.device(self._ctx.device))

    def leave(self) -> None:
        import torch.distributed as dist

        self._on_device()
        if dist.is_initialized():
            dist.destroy_process_group()

    def reset(self) -> None:
        """Back to a fresh actor's state, for the next job (a pool's): the process group
        destroyed, the environment join() set undone, no rank context, a new heartbeat, and
        the allocator's cached blocks returned (an idle pooled rank holds none, and the next
        job's free-memory reading is its own)."""
        self.leave()
        for key, value in self._env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._env_before = {}
        self._ctx = None
        self._heartbeat = Heartbeat()
        gc.collect()  # NOTE: a check's buffers in a reference cycle hold their blocks till then
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def run_step(self, step: StepSpec, faults: tuple[ActiveFault, ...]) -> list[Row]:
        if self._ctx is None:
            raise RuntimeError("run_step before join(): the driver must form the group first")
        self._on_device()
        ctx = CheckContext(self._ctx, step.step_name, faults, self._heartbeat)
        self._heartbeat.set(step=step.step_name, phase="start", collective=None, iteration=None,
                            calls=0, planned=None, step_started_at=time.time())  # fmt: skip
        rows = CHECKS[step.check].run(ctx, step)
        ctx.synchronize()
        self._heartbeat.set(phase="done")
        return rows

    def progress(self) -> Progress:
        return self._heartbeat.get()

    def flight_recorder(self) -> bytes | None:
        """This job's Flight Recorder trace from this rank (each collective's state), pickled as
        torch's analyser reads it; None where nothing records (gloo without a buffer size).

        Answered from the actor's second thread, so it works while a collective hangs.
        """
        if self._ctx is None:
            return None
        if self._ctx.backend != "nccl" and not any(os.environ.get(v) for v in FR_BUFFER_VARS):
            return None
        trace = _fr_dump(self._ctx.backend, stacks=True)
        return None if trace is None else flightrec.since(trace, self._fr_mark)

    def files(self, pattern: str, max_bytes: int = 64 << 20) -> dict[str, bytes]:
        """Files on this node matching a glob (Flight Recorder dumps, NCCL logs), for the driver."""
        out: dict[str, bytes] = {}
        for path in sorted(glob.glob(pattern)):
            size = os.path.getsize(path)
            if size > max_bytes:
                continue
            with open(path, "rb") as f:
                out[os.path.basename(path)] = f.read()
        return out

    def fingerprint(self) -> dict[str, Any]:
        from fleetval.checks.environment import fingerprint

        return fingerprint()
