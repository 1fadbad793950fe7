"""A job's life as one context manager: placement group, rank actors, rendezvous, teardown.

Every Ray failure on the way (an actor that cannot describe its device, a rank that does
not join, a node lost while fingerprinting) becomes a culprit naming rank, node and
device, carried by `JobAborted`; the run goes on with its next job. The group and the
actors are removed on every exit path.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fleetval.checks.base import RankContext
from fleetval.policy import FailurePolicy
from fleetval.run.culprits import is_symptom
from fleetval.run.life import RunLife
from fleetval.run.outcome import Culprit, Event, EventSink, StepOutcome
from fleetval.run.plan import NODE_LABEL, Job
from fleetval.run.rank import Placed, RankActor
from fleetval.run.ranksettings import rank_settings
from fleetval.suite import Suite
from fleetval.text import short
from fleetval.vocab import CulpritReason

if TYPE_CHECKING:  # NOTE: the store imports pyarrow, which a job's own work does not need
    from fleetval.store.dataset import Store
    from fleetval.store.records import Run

log = logging.getLogger(__name__)

RemoteRank = ray.remote(RankActor)
LOOPBACK_IFNAME = "lo"  # Linux's loopback interface


NOT_PLACED = "not placed: "  # a job the cluster could not place: its answer, not a node's


class JobAborted(RuntimeError):
    """The job's actors can no longer be trusted (dead, hung or unplaceable)."""

    def __init__(self, message: str, culprits: tuple[Culprit, ...] = ()) -> None:
        super().__init__(message)
        self.culprits = culprits


@dataclass
class RankHandle:
    """Driver-side handle of one rank actor."""

    actor: Any
    placed: Placed
    ctx: RankContext | None = None

    @property
    def rank(self) -> int:
        return self.ctx.rank if self.ctx is not None else -1

    def culprit(self, reason: str, detail: str) -> Culprit:
        return Culprit(
            self.rank, self.placed.node, self.placed.device_id, str(reason), detail, self.placed.pid
        )


@dataclass
class Pooled:
    """An idle placement group and its rank actors (driver-side handles, in rank order); a
    node pool's ranks lie in their nodes' groups, which it keeps (`pg` None)."""

    pg: PlacementGroup | None
    ranks: list[RankHandle]
    since: float = 0.0  # time.monotonic() when it became idle


class WarmRanks(Protocol):
    """What a job takes its ranks from, when it does not start its own (`job_ranks`); the
    pools of `fleetval.run.pool` are the ones there are."""

    def take(self, job: Job, policy: FailurePolicy) -> Pooled | None: ...

    def give_back(
        self, job: Job, pg: PlacementGroup | None, ranks: list[RankHandle], policy: FailurePolicy
    ) -> None: ...


@dataclass
class RunState:
    """A run while its jobs execute: what it is (built complete, never set afterwards) and
    what it accumulates. Its life (`RunLife`) is the one thing that moves it, stopped
    included; a sweep's jobs each have a copy of it (`dataclasses.replace`) sharing the life."""

    run_id: str
    suite: Suite
    store: Store
    on_event: EventSink
    total_steps: int
    life: RunLife = field(default_factory=RunLife)
    pool: WarmRanks | None = None  # warm ranks kept between jobs (the service's, a sweep's)
    # What it accumulates as its jobs run.
    done_steps: int = 0
    backend: str = ""  # the first job's
    outcomes: list[StepOutcome] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # More for the run's summary (a sweep's verdict).
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def record(self) -> Run | None:
        """The run's stored record, once it has ended (its life's outcome)."""
        outcome = self.life.outcome
        return outcome.record if outcome is not None else None

    def check_cancelled(self) -> None:
        """Every wait's look at the run's life: RunStopped once a stop was asked."""
        self.life.check()

    def event(
        self, kind: str, job: int, step: str, detail: str = "", outcome: StepOutcome | None = None
    ) -> None:
        self.on_event(Event(kind, job, step, self.done_steps, self.total_steps, detail, outcome))


# -- the job as a context manager ----------------------------------------------------------


@contextmanager
def job_ranks(job: Job, state: RunState) -> Iterator[list[RankHandle]]:
    """Ranks of a formed process group; torn down (actors killed, group removed) on exit.

    With a pool (`state.pool`: the service's, a sweep's), the ranks come from it when it has
    healthy ones for this job, and a job that ends cleanly gives them back (reset) instead of
    tearing them down; any other exit tears them down (a pool's groups stay with the pool).
    A step that broke the job (`StepOutcome.breaks_job`, recorded in `state.outcomes`) leaves
    its ranks untrusted: torn down. Every wait on the way looks at the run's life
    (`state.check_cancelled`): a stop unwinds it with `RunStopped`, and the ranks are torn down."""
    t, tick = state.suite.timeouts, state.check_cancelled
    first = len(state.outcomes)
    pooled = state.pool.take(job, t) if state.pool is not None else None
    pg: PlacementGroup | None = pooled.pg if pooled else None
    ranks: list[RankHandle] = pooled.ranks if pooled else []
    clean = False
    try:
        if pooled is None:
            pg = create_group(job, t, tick)
            ranks = start_ranks(job, pg, t, tick)
        assign(ranks, job, state.run_id, state.suite.seed)
        fingerprint_nodes(ranks, state, t.rendezvous_s)
        rendezvous(ranks, job, state.suite, state.run_id, tick)
        yield ranks
        clean = not any(o.breaks_job for o in state.outcomes[first:] if o.job == job.index)
    finally:
        if not state.life.stopping:
            keep_node_files(ranks, state, job)  # NOTE: evidence, not worth delaying a cancel
        if clean and state.pool is not None and ranks:
            state.pool.give_back(job, pg, ranks, t)
        else:
            teardown(ranks, pg)


def create_group(
    job: Job, policy: FailurePolicy, tick: Callable[[], None] | None = None
) -> PlacementGroup:
    """A ready placement group for the job, or JobAborted (the group removed, as on a cancel
    raised by `tick`)."""
    bundles = [job.bundle()] * job.world_size
    selector = job.label_selector()
    pg = placement_group(
        bundles,
        strategy=job.strategy.value,
        bundle_label_selector=[selector] * job.world_size if selector else None,
    )
    timeout_s = policy.placement_s
    try:
        ((kind, err),) = gather(
            [pg.ready()], time.monotonic() + timeout_s, tick=tick, poll_s=policy.poll_s
        )
    except BaseException:
        remove_placement_group(pg)
        raise
    if kind != "ok":
        remove_placement_group(pg)
        free = ray.available_resources()
        raise JobAborted(
            f"{NOT_PLACED}placement group of {job.world_size} x {job.bundle()} ({job.strategy.value}) not ready "
            f"within {timeout_s:g}s; free now: {free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU"
        ) from (err if isinstance(err, BaseException) else None)
    return pg


def start_ranks(
    job: Job, pg: PlacementGroup, policy: FailurePolicy, tick: Callable[[], None] | None = None
) -> list[RankHandle]:
    """One actor per bundle, ordered into ranks by node name, then GPU id.

    An actor that cannot describe itself (dead, too slow, or its device unusable) is named
    by its bundle's node, and the job is aborted with it as the culprit.
    """
    timeout_s = policy.rendezvous_s
    actors = [
        RemoteRank.options(
            num_cpus=job.cpus_per_rank,
            num_gpus=job.gpus_per_rank,
            max_concurrency=2,  # progress() answers while run_step blocks
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote(job.gpus_per_rank, rank_settings(job))
        for i in range(job.world_size)
    ]
    try:
        answers = gather(
            [a.describe.remote() for a in actors],
            time.monotonic() + timeout_s,
            tick=tick,
            poll_s=policy.poll_s,
        )
    except BaseException:  # a cancel: nobody else holds these actors yet
        teardown([RankHandle(a, _unknown_placed(None)) for a in actors], None)
        raise
    nodes = _bundle_nodes(pg)
    handles, failed = [], []
    for i, (actor, (kind, value)) in enumerate(zip(actors, answers, strict=True)):
        if kind == "ok":
            handles.append(RankHandle(actor, value))
        else:
            handles.append(RankHandle(actor, _unknown_placed(nodes.get(i))))
            failed.append(
                (handles[-1], _failure_text(kind, value, f"describe within {timeout_s:g}s"))
            )
    handles.sort(key=lambda r: (r.placed.node, r.placed.gpu_order, r.placed.node_id))
    if failed:
        for rank, h in enumerate(handles):  # ranks as they would have been, to name the culprit
            h.ctx = _bare_ctx(rank, job, h.placed)
        culprits = tuple(h.culprit(CulpritReason.NOT_PLACED, text) for h, text in failed)
        teardown(handles, None)
        raise JobAborted(f"rank actors did not start: {_names(culprits)}", culprits)
    return handles


def gather(
    refs: list[Any],
    deadline: float,
    grace_s: float = 0.0,
    tick: Callable[[], None] | None = None,
    on_failure: Callable[[], None] | None = None,
    poll_s: float = 0.5,
) -> list[tuple[str, Any]]:
    """Wait on all refs at once until all answer or the deadline passes.

    Each answer is ("ok", value), ("crash", err), ("raised", err) or ("pending", None).
    With `grace_s`, the first failure shortens the deadline to now + grace_s; `on_failure`
    is called once, right then (to take evidence before more ranks go down). `tick` is
    called at least every `poll_s` (it may raise, e.g. on a cancel, ending the wait).
    """
    failed = False
    out: list[tuple[str, Any]] = [("pending", None)] * len(refs)
    index = {ref: i for i, ref in enumerate(refs)}
    pending = list(refs)
    while pending and time.monotonic() < deadline:
        wait_s = min(poll_s, max(0.0, deadline - time.monotonic()))
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
        for ref in ready:
            out[index[ref]] = _answer(ref)
            if out[index[ref]][0] != "ok":
                if grace_s:
                    deadline = min(deadline, time.monotonic() + grace_s)
                if on_failure is not None and not failed:
                    on_failure()
                failed = True
        if tick is not None:
            tick()
    return out


def _answer(ref: Any) -> tuple[str, Any]:
    try:
        return "ok", ray.get(ref)
    except RayActorError as err:
        return "crash", err
    except RayTaskError as err:
        return "raised", err
    except RayError as err:  # e.g. the object was lost with its node
        return "crash", err


def _failure_text(kind: str, err: Any, what: str) -> str:
    if kind == "pending":
        return f"did not {what}"
    if kind == "crash":
        return f"rank process died: {short(err)}"
    return f"raised {short(err)}"


@dataclass(frozen=True)
class BundleNode:
    """The Ray node that holds a bundle of a placement group, as its table names it."""

    node: str  # its fleetval/node label, else its hostname
    node_id: str
    ip: str


def _bundle_nodes(pg: PlacementGroup) -> dict[int, BundleNode]:
    """Bundle index -> the Ray node holding it, from the group's table."""
    try:
        table = placement_group_table(pg)
        by_id = {n["NodeID"]: n for n in ray.nodes()}
    except Exception:  # evidence only: the culprit is named with what is known
        return {}
    out = {}
    for i, node_id in (table.get("bundles_to_node_id") or {}).items():
        n = by_id.get(node_id, {})
        name = (n.get("Labels") or {}).get(NODE_LABEL) or n.get("NodeManagerHostname", "?")
        out[int(i)] = BundleNode(name, node_id, n.get("NodeManagerAddress", ""))
    return out


def _unknown_placed(node: BundleNode | None) -> Placed:
    """An actor that could not describe itself, placed as far as its bundle's node is known."""
    node = node or BundleNode("?", "", "")
    return Placed(
        node=node.node,
        node_id=node.node_id,
        node_ip=node.ip,
        hostname="",
        gpu_ids=(),
        device="?",
        device_id=None,
    )


def _bare_ctx(rank: int, job: Job, placed: Placed) -> RankContext:
    return RankContext(
        run_id="",
        job=job.index,
        rank=rank,
        world_size=job.world_size,
        local_rank=0,
        local_world_size=1,
        node=placed.node,
        node_rank=0,
        backend=job.backend,
        device=placed.device,
        device_id=placed.device_id,
        seed=0,
    )


def assign(ranks: list[RankHandle], job: Job, run_id: str, seed: int) -> None:
    node_names = sorted({r.placed.node for r in ranks})
    for i, r in enumerate(ranks):
        same_node = [x for x in ranks if x.placed.node == r.placed.node]
        r.ctx = RankContext(
            run_id=run_id,
            job=job.index,
            rank=i,
            world_size=job.world_size,
            local_rank=same_node.index(r),
            local_world_size=len(same_node),
            node=r.placed.node,
            node_rank=node_names.index(r.placed.node),
            backend=job.backend,
            device=r.placed.device,
            device_id=r.placed.device_id,
            seed=seed,
        )


def fingerprint_nodes(ranks: list[RankHandle], state: RunState, timeout_s: float) -> None:
    """One environment fingerprint per node not yet seen in this run.

    A node too slow to answer is recorded with the error (a fingerprint is evidence, not a
    gate); a rank actor that died doing it is the job's `crash` culprit.
    """
    firsts = {r.placed.node: r for r in reversed(ranks) if r.placed.node not in state.nodes}
    names = list(firsts)
    answers = gather(
        [firsts[n].actor.fingerprint.remote() for n in names], time.monotonic() + timeout_s
    )
    for name, (kind, value) in zip(names, answers, strict=True):
        r = firsts[name]
        fp = (
            value
            if kind == "ok"
            else {"extra": json.dumps({"error": _failure_text(kind, value, "answer")})}
        )
        state.nodes[name] = {
            **fp,
            "node": name,
            "hostname": r.placed.hostname,
            "node_ip": r.placed.node_ip,
            "ray_node_id": r.placed.node_id,
        }
        warn_low_priority(name, fp)
    dead = tuple(
        firsts[n].culprit(CulpritReason.CRASH, _failure_text(k, v, "fingerprint"))
        for n, (k, v) in zip(names, answers, strict=True)
        if k == "crash"
    )
    if dead:
        raise JobAborted(f"rank lost while fingerprinting its node: {_names(dead)}", dead)


def warn_low_priority(node: str, fingerprint: dict[str, Any]) -> bool:
    """Warn (and say so) when a node's ranks ran below normal priority: started niced (a cluster
    started without RAY_worker_niceness=0, docs/deploy.md) where a process may not raise its
    own priority (no CAP_SYS_NICE), so `ranksettings.apply` could not: they yield to every
    other process on it."""
    try:
        nice = json.loads(fingerprint.get("extra") or "{}").get("niceness")
    except (ValueError, AttributeError):
        return False
    if not isinstance(nice, int) or nice <= 0:
        return False
    log.warning(
        "node %s: ranks run at nice %d, behind every other process on it (start-up and timings "
        "measure that load), and may not raise their own priority there: start Ray there with "
        "RAY_worker_niceness=0",
        node,
        nice,
    )
    return True


def dump_dir(run_id: str, job: int) -> str:
    """Where a job's ranks write Flight Recorder dumps and NCCL logs, each on its own node."""
    return os.path.join(tempfile.gettempdir(), "fleetval", run_id, f"job{job}")


def rank_env(run_id: str, job: Job, master: str) -> dict[str, str]:
    """Environment for every rank before the group forms: NCCL logs and Flight Recorder dumps,
    and on a loopback node (the embedded instance) the collectives' sockets on loopback too.

    NOTE: the watchdog's default (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) kills a rank whose
    collective timed out, which would turn the healthy peers of a hung rank into "crashes"
    before the driver can ask them anything; 2 aborts the communicator and raises instead.
    Both dump variables are set: torch reads TORCH_FR_DUMP_TEMP_FILE in recent releases and
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE in older ones; so are both buffer sizes (TORCH_FR_BUFFER_SIZE
    since torch 2.9, TORCH_NCCL_TRACE_BUFFER_SIZE before). The user's own settings win.
    """
    env = _loopback_env(master)
    if job.backend != "nccl":
        return env
    folder = dump_dir(run_id, job.index)
    prefix = os.path.join(folder, "flight-recorder-rank-")
    env |= {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    }
    if "NCCL_DEBUG" not in os.environ:
        env |= {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": os.path.join(folder, "nccl.%h.%p.log")}
    return {k: v for k, v in env.items() if k not in os.environ}


def _loopback_env(master: str) -> dict[str, str]:
    """Gloo and NCCL bind to the interface of the host's name unless told: on a node whose
    address is loopback, tell them (a rank then talks to its peers over 127.0.0.1 only)."""
    with suppress(ValueError):
        if ipaddress.ip_address(master).is_loopback:
            return {"GLOO_SOCKET_IFNAME": LOOPBACK_IFNAME, "NCCL_SOCKET_IFNAME": LOOPBACK_IFNAME}
    return {}


def rendezvous(
    ranks: list[RankHandle],
    job: Job,
    suite: Suite,
    run_id: str,
    tick: Callable[[], None] | None = None,
) -> None:
    """Form the process group on rank 0's node address; retry on a port clash.

    A rank that dies or raises on its own is the culprit; ranks still waiting for it are not.
    """
    t = suite.timeouts
    master = ranks[0].placed.node_ip
    env = rank_env(run_id, job, master)
    settings = rank_settings(job)  # the same for every rank, however the run was submitted
    for attempt in range(t.port_retries):
        ((kind, port),) = gather(
            [ranks[0].actor.free_port.remote()], time.monotonic() + t.rendezvous_s, tick=tick
        )
        if kind != "ok":
            culprit = ranks[0].culprit(
                CulpritReason.NOT_JOINED, _failure_text(kind, port, "give a port")
            )
            raise JobAborted(f"process group not formed: {_names((culprit,))}", (culprit,))
        refs = [
            r.actor.join.remote(r.ctx, master, port, t.collective, env, settings) for r in ranks
        ]
        answers = gather(refs, time.monotonic() + t.rendezvous_s, grace_s=t.join_grace_s, tick=tick)
        if all(kind == "ok" for kind, _ in answers):
            return
        clash = any(
            k == "raised" and "address already in use" in str(v).lower() for k, v in answers
        )
        if clash and attempt + 1 < t.port_retries and leave(ranks, t.rendezvous_s):
            continue
        culprits = join_culprits(ranks, answers, t.rendezvous_s)
        raise JobAborted(f"process group not formed: {_names(culprits)}", culprits)


def join_culprits(
    ranks: list[RankHandle], answers: list[tuple[str, Any]], timeout_s: float
) -> tuple[Culprit, ...]:
    """Died first, then raised on its own, then (only if nobody else is to blame) not joined."""
    for kinds in (("crash",), ("raised",)):
        named = [
            r.culprit(
                CulpritReason.CRASH if kind == "crash" else CulpritReason.NOT_JOINED,
                _failure_text(kind, v, "join"),
            )
            for r, (kind, v) in zip(ranks, answers, strict=True)
            if kind in kinds and not (kind == "raised" and is_symptom(str(v)))
        ]
        if named:
            return tuple(named)
    return tuple(
        r.culprit(CulpritReason.NOT_JOINED, _failure_text(kind, v, f"join within {timeout_s:g}s"))
        for r, (kind, v) in zip(ranks, answers, strict=True)
        if kind != "ok"
    )


def leave(ranks: list[RankHandle], timeout_s: float) -> bool:
    """Every rank leaves its (half-formed) group; False if one could not."""
    answers = gather([r.actor.leave.remote() for r in ranks], time.monotonic() + timeout_s)
    return all(kind == "ok" for kind, _ in answers)


def keep_node_files(ranks: list[RankHandle], state: RunState, job: Job) -> None:
    """Before teardown: each node's NCCL logs and Flight Recorder dumps become run artifacts."""
    if job.backend != "nccl" or not ranks:
        return
    pattern = os.path.join(dump_dir(state.run_id, job.index), "*")
    by_node = {r.placed.node: r for r in ranks}
    names = list(by_node)
    deadline = time.monotonic() + state.suite.timeouts.files_s
    answers = gather([by_node[n].actor.files.remote(pattern) for n in names], deadline)
    for node, (kind, files) in zip(names, answers, strict=True):
        if kind != "ok":
            log.warning("node %s: could not collect its NCCL logs and dumps", node)
            continue
        for name, data in files.items():
            safe = re.sub(r"[^\w.-]", "_", f"job{job.index}-{node}-{name}")
            state.store.write_artifact(state.run_id, safe, data)


def teardown(ranks: list[RankHandle], pg: PlacementGroup | None) -> None:
    """Kill every actor and remove the group; never raises (it runs on every exit path)."""
    for r in ranks:
        try:
            ray.kill(r.actor, no_restart=True)
        except Exception as err:
            log.warning("kill rank actor: %s", err)
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception as err:
            log.warning("remove placement group: %s", err)


def _names(culprits: tuple[Culprit, ...]) -> str:
    return ", ".join(f"rank {c.rank} on {c.node} ({c.reason}: {c.detail})" for c in culprits)
