"""The vocabulary of fleetval, named once: every enum a suite, a row or a verdict uses."""

from enum import StrEnum


class Collective(StrEnum):
    """A torch.distributed communication pattern."""

    ALL_REDUCE = "all_reduce"  # every rank gets the reduction of all inputs
    ALL_GATHER = "all_gather"  # every rank gets every rank's input, concatenated
    REDUCE_SCATTER = "reduce_scatter"  # rank r gets chunk r of the reduction
    BROADCAST = "broadcast"  # every rank gets the root's input
    REDUCE = "reduce"  # the root gets the reduction
    ALL_TO_ALL = "all_to_all"  # rank r sends chunk j to rank j
    SEND_RECV = "send_recv"  # a ring: rank r sends to r+1 and receives from r-1
    BARRIER = "barrier"  # synchronisation only, no data


class ReduceOp(StrEnum):
    """Reduction applied by all_reduce, reduce and reduce_scatter."""

    SUM = "sum"
    AVG = "avg"  # nccl only in torch; gloo does not implement it
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


class DType(StrEnum):
    """Element type of the tensors a check moves."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    INT32 = "int32"
    INT64 = "int64"


class Backend(StrEnum):
    """torch.distributed backend; `auto` means nccl where ranks hold GPUs, else gloo."""

    AUTO = "auto"
    NCCL = "nccl"  # also RCCL on ROCm builds of torch
    GLOO = "gloo"


class Strategy(StrEnum):
    """Ray placement-group strategy for a job's bundles (one bundle per rank)."""

    PACK = "PACK"  # as few nodes as possible, spill over if needed
    SPREAD = "SPREAD"  # across nodes where possible
    STRICT_PACK = "STRICT_PACK"  # all ranks on one node
    STRICT_SPREAD = "STRICT_SPREAD"  # every rank on a different node


class FaultKind(StrEnum):
    """Injected misbehaviour of one rank (or every rank on one node)."""

    DELAY = "delay"  # sleep `ms` before each collective
    HANG = "hang"  # stop participating: block forever inside the step
    CRASH = "crash"  # the rank's process exits
    CORRUPT = "corrupt"  # the rank contributes wrong data


class CulpritReason(StrEnum):
    """Why a rank is named as a step's culprit (crash, hang and error abort the job; late and
    slow do not by themselves)."""

    CRASH = "crash"  # the rank's process died (or its node was lost)
    HANG = "hang"  # stopped making progress: silent, or behind the others' collectives
    ERROR = "error"  # raised an exception of its own (not a peer's timeout or lost connection)
    LATE = "late"  # finished, but measurably later than its peers (a lateness score)
    SLOW = "slow"  # still progressing when the step's deadline passed, but far behind the others
    NOT_PLACED = "not placed"  # its actor never started or could not describe its device
    NOT_JOINED = "not joined"  # did not join the process group


# The `metric` of a culprit's own row (`run.step.culprit_row`): who broke or slowed a step,
# not a measurement; compare and trend judge measurements only.
CULPRIT_METRIC = "step_outcome"


class Status(StrEnum):
    """Outcome of one measurement row or one step (fleetval.status derives one from the other).

    PASS, WARN and FAIL are judgements; SKIP, INFO and UNJUDGED say that nothing was judged.
    """

    PASS = "pass"  # judged against an expectation and met
    WARN = "warn"  # judged: works, but something a human should look at
    FAIL = "fail"  # judged and not met; also an error inside a check, or declared evidence missing
    SKIP = (
        "skip"  # not measured here (tool or feature absent, nothing declared); the reason says why
    )
    INFO = "info"  # row only: measured and recorded, with no expectation to judge it against
    UNJUDGED = "unjudged"  # step only: it ran, but judged nothing (only info or skip rows)


class RunStatus(StrEnum):
    """Outcome of a whole run, as stored in the runs table (fleetval.status.run_status)."""

    PASS = "pass"  # something was judged and every judgement passed
    WARN = "warn"  # judged and passed, with warnings (late ranks, warn rows)
    FAIL = "fail"  # a step failed: a culprit, a failed row, a deadline that ran out
    UNJUDGED = "unjudged"  # it ran, but no step judged anything against an expectation
    CANCELLED = "cancelled"  # stopped by request or Ctrl-C; finished steps are kept
    ERROR = "error"  # the driver could not run it (e.g. the cluster cannot place it)
    INTERRUPTED = "interrupted"  # the service died while it ran; finished steps are kept
    INCOMPLETE = "incomplete"  # read back without a run record: cut off before it was written


class QueueStatus(StrEnum):
    """Where a service submission is; a finished one carries its run's own status."""

    QUEUED = "queued"  # committed, waiting for the executor
    RUNNING = "running"  # the executor is running it
    PASS = RunStatus.PASS.value
    WARN = RunStatus.WARN.value
    FAIL = RunStatus.FAIL.value
    UNJUDGED = RunStatus.UNJUDGED.value
    CANCELLED = RunStatus.CANCELLED.value
    ERROR = RunStatus.ERROR.value
    INTERRUPTED = RunStatus.INTERRUPTED.value


class Verdict(StrEnum):
    """Result of comparing one candidate measurement with its baseline."""

    REGRESSION = "regression"  # worse beyond the threshold, statistically supported
    IMPROVEMENT = "improvement"  # better beyond the threshold, statistically supported
    UNCHANGED = "unchanged"  # within the threshold
    NOISY = "noisy"  # the change may exceed the threshold but the evidence is too spread
    MISSING = "missing"  # in the baseline, not in the candidate
    NEW = "new"  # in the candidate, not in the baseline
    FAILED = "failed"  # correctness: wrong elements or a failed status, whatever the baseline


class AttributionVerdict(StrEnum):
    """What attribution says a version change did at one measurement (`fleetval attribute`):
    compare's words where the change was measured alone, else why it was not judged."""

    REGRESSION = "regression"  # worse beyond the threshold, statistically supported
    IMPROVEMENT = "improvement"  # better beyond the threshold, statistically supported
    UNCHANGED = "unchanged"  # within the threshold
    CONFOUNDED = "confounded"  # changed together with another component, never apart
    INSUFFICIENT = "insufficient"  # too few nodes or nights side by side, or too noisy


class Catchup(StrEnum):
    """What a service schedule does about fire times that came due while no service ran."""

    ONCE = "once"  # one run, for the latest of them
    SKIP = "skip"  # nothing until the next fire time


class NodeState(StrEnum):
    """A fleet sweep's verdict on one node."""

    HEALTHY = "healthy"  # the fabric model judges it no slower than the tolerance (95%)
    SUSPECT = "suspect"  # estimated slow, not proven: look, do not drain yet
    DRAIN = "drain"  # its effect flagged (false-discovery rate controlled): take it out
    UNJUDGED = "unjudged"  # too few jobs for the noise to judge it either way


class LinkState(StrEnum):
    """What a fleet sweep's last job over a link says of it, worst first."""

    FAILED = "failed"  # the job failed: no figure
    SLOW = "slow"  # slower than its round's level and load allow
    UNCLEAR = "unclear"  # within the noise of the tolerance
    FAST = "fast"


class GateStatus(StrEnum):
    """Outcome of one sign-off gate, and of the whole sign-off (PASS or FAIL): a report's word,
    upper case, beside the row and run statuses above."""

    PASS = "PASS"
    FAIL = "FAIL"  # also when the gate found no evidence: never a silent PASS
    WAIVED = "WAIVED"  # failed, but accepted by a named person for a stated reason


class SweepPhase(StrEnum):
    """What a fleet sweep job measures."""

    ALONE = "alone"  # every rank of one node, no network
    PAIR = "pair"  # two nodes: their NICs and the link between them


class EventKind(StrEnum):
    """A progress event of a run, as the engine emits it and the service stores and streams it."""

    RUN_START = "run_start"  # the service began executing a submission (attempt n)
    STEP_START = "step_start"  # a step of a job began
    STEP_PROGRESS = "step_progress"  # the leading rank's progress within a step (coalesced)
    STEP_END = "step_end"  # a step finished, with its outcome
    RUN_END = "run_end"  # the run reached a final status (the last event of every stream)


class OutputFormat(StrEnum):
    """How a command or the service writes what it read: the one list of output formats. Each
    command offers those its writers know, named from here (`COMPARE_FORMATS` and the like)."""

    TABLE = "table"  # for a terminal (rich)
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"  # GitHub-flavoured: a CI summary or a PR comment
    JUNIT = "junit"  # a CI system's test report (XML)
    PARQUET = "parquet"  # the service's results: every column, samples included
