"""The rank actor: thin. Binds its device, joins the process group, runs one check at a time.

The executor wraps this class with `ray.remote(max_concurrency=2)` so `progress()` is
answered from a second thread while a check blocks the first inside a collective.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import ray
import torch
import torch.distributed as dist

from fleetval.checks import CHECKS
from fleetval.checks.base import ActiveFault, CheckContext, Heartbeat, Progress, RankContext
from fleetval.plan import NODE_LABEL
from fleetval.results import Row


@dataclass(frozen=True)
class Placed:
    """Where Ray put an actor: enough for the driver to order ranks by node, then GPU id."""

    node: str
    node_id: str
    node_ip: str
    hostname: str
    gpu_ids: tuple[int, ...]
    device: str
    device_id: str | None


def _device_id(index: int) -> str | None:
    """The physical GPU's UUID (else PCI bus id), so a bad GPU is named, not just a rank."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return f"GPU-{uuid}"
    bus = getattr(props, "pci_bus_id", None)
    return f"pci:{bus}" if bus is not None else None


def init_process_group(ctx: RankContext, master: str, port: int, timeout_s: float) -> None:
    """The one place the process group is formed: TCP rendezvous on rank 0's address."""
    if ctx.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(ctx.device))
    dist.init_process_group(
        backend=ctx.backend,
        init_method=f"tcp://{master}:{port}",
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timedelta(seconds=timeout_s),
        # NOTE: binds NCCL communicators to this device eagerly, so a bad GPU fails here.
        device_id=torch.device(ctx.device) if ctx.backend == "nccl" else None,
    )


class RankActor:
    """One rank of one job; lives as long as the job's placement group."""

    def __init__(self, gpus_per_rank: float) -> None:
        self._heartbeat = Heartbeat()
        self._ctx: RankContext | None = None
        self._wants_gpu = gpus_per_rank > 0

    def describe(self) -> Placed:
        rt = ray.get_runtime_context()
        gpu_ids = tuple(int(g) for g in ray.get_gpu_ids())
        # Ray sets CUDA/ROCR/HIP_VISIBLE_DEVICES to this actor's GPUs, so ours is index 0.
        on_gpu = self._wants_gpu and torch.cuda.is_available()
        return Placed(
            node=rt.get_node_labels().get(NODE_LABEL) or socket.gethostname(),
            node_id=rt.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            hostname=socket.gethostname(),
            gpu_ids=gpu_ids,
            device="cuda:0" if on_gpu else "cpu",
            device_id=_device_id(0) if on_gpu else None,
        )

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def join(
        self, ctx: RankContext, master: str, port: int, timeout_s: float, env: dict[str, str]
    ) -> None:
        os.environ.update(env)
        self._ctx = ctx
        self._heartbeat.set(phase="rendezvous")
        init_process_group(ctx, master, port, timeout_s)
        self._heartbeat.set(phase="ready")

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def run_step(self, step: Any, faults: tuple[ActiveFault, ...]) -> list[Row]:
        if self._ctx is None:
            raise RuntimeError("run_step before join(): the driver must form the group first")
        ctx = CheckContext(self._ctx, step.step_name, faults, self._heartbeat)
        self._heartbeat.set(step=step.step_name, phase="start", collective=None, iteration=None)
        rows = CHECKS[step.check].run(ctx, step)
        ctx.synchronize()
        self._heartbeat.set(phase="done")
        return rows

    def progress(self) -> Progress:
        return self._heartbeat.get()

    def flight_recorder(self) -> bytes | None:
        """This rank's NCCL Flight Recorder trace (each collective's state), where torch has one.

        Answered from the actor's second thread, so it works while a collective hangs.
        """
        if self._ctx is None or self._ctx.backend != "nccl":
            return None
        from torch._C import _distributed_c10d as c10d

        for name in ("_dump_nccl_trace_json", "_dump_nccl_trace"):
            dump = getattr(c10d, name, None)
            if dump is None:
                continue
            try:
                out = dump()
            except RuntimeError:  # built without the recorder, or its buffer size is 0
                return None
            return out.encode() if isinstance(out, str) else out
        return None

    def fingerprint(self) -> dict[str, Any]:
        from fleetval.environment import fingerprint

        return fingerprint()
