"""Real NCCL error texts, as torch raised them in public issues: a rank's own failure or a
peer's symptom. Every NCCL failure is a `DistBackendError`; only the text says whose it is.

Sources (the text quoted as the issue shows it, frames and log lines left out):
  DUPLICATE_GPU     verl-project/verl#161 (NCCL 2.20.5), Peterande/D-FINE#289 (2.19.3)
  CUDA_INVALID      NVIDIA/nccl#1410 (NCCL 2.20.5)
  CUDA_INIT         NVIDIA/nccl#1029 (NCCL 2.18.3)
  REMOTE_RESET      NVIDIA/nccl#2076 (NCCL 2.21.5)
  REMOTE_OFI        NVIDIA/nccl#1928 (NCCL 2.28.8)
  REMOTE_IB         tatsu-lab/stanford_alpaca#207 (NCCL 2.14.3)
  ABORTED           open-mmlab/mmdetection#12392
  WATCHDOG_THREAD   huggingface/open-r1#620
"""

from __future__ import annotations

import pytest

from fleetval.run.culprits import RankEvidence, is_symptom, name_culprits
from fleetval.run.job import RankHandle, join_culprits
from fleetval.run.rank import Placed

DUPLICATE_GPU = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN "
    "for details), NCCL version 2.20.5\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\n"
    "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 10"
)
CUDA_INVALID = (
    "[rank7]: torch.distributed.DistBackendError: NCCL error in: "
    "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
    "[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "[rank7]: Last error:\n"
    "[rank7]: Cuda failure 1 'invalid argument'"
)
CUDA_INIT = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1197, unhandled cuda "
    "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Cuda failure 'initialization error'"
)
OWN = [DUPLICATE_GPU, CUDA_INVALID, CUDA_INIT]

REMOTE_RESET = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was "
    "a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process "
    "exiting prematurely.\n"
    "Last error:\n"
    "socketProgressOpt: Call to recv from 172.16.0.2<33759> failed : Connection reset by peer"
)
REMOTE_OFI = (
    "[rank3]: torch.distributed.DistBackendError: NCCL error in: "
    "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3763, remote process "
    "exited or there was a network error, NCCL version 2.28.8\n"
    "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote "
    "process exiting prematurely.\n"
    "[rank3]: Last error:\n"
    "[rank3]: NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 "
    "(UNDELIVERABLE). Completed length: 0"
)
REMOTE_IB = (
    "terminate called after throwing an instance of 'std::runtime_error' what(): NCCL error: "
    "remote process exited or there was a network error, NCCL version 2.14.3 ncclRemoteError: "
    "A call failed possibly due to a network error or a remote process exiting prematurely. "
    "Last error: NET/IB : Got completion from peer 11.214.147.122<39138> with error 12, "
    "opcode 0, len 0, vendor err 129"
)
ABORTED = (
    "RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: "
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2511984, "
    "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1809553 milliseconds before timing out."
)
WATCHDOG_THREAD = (
    "c10::DistBackendError what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group "
    "watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, NumelOut=112, "
    "Timeout(ms)=1800000) ran for 1800011 milliseconds before timing out."
)
PEER = [REMOTE_RESET, REMOTE_OFI, REMOTE_IB, ABORTED, WATCHDOG_THREAD]


def wrapped(text: str) -> str:
    """As the driver sees it: Ray's task error around the rank's exception."""
    return f"ray.exceptions.RayTaskError(DistBackendError): ray::RankActor.join()\n{text}"


@pytest.mark.parametrize("text", OWN, ids=["duplicate_gpu", "cuda_invalid", "cuda_init"])
def test_a_ranks_own_nccl_failure_is_not_a_symptom(text):
    assert not is_symptom(wrapped(text))


@pytest.mark.parametrize("text", PEER, ids=["reset", "ofi", "ib", "aborted", "watchdog"])
def test_remote_errors_timeouts_and_aborts_are_symptoms(text):
    assert is_symptom(wrapped(text))


def test_the_rank_that_failed_on_its_own_is_named_not_every_rank():
    evidence = [
        RankEvidence(0, "n0", "GPU-0", "raised", error=wrapped(ABORTED)),
        RankEvidence(1, "n0", "GPU-1", "raised", error=wrapped(CUDA_INVALID)),
        RankEvidence(2, "n1", "GPU-2", "raised", error=wrapped(REMOTE_RESET)),
    ]
    (c,) = name_culprits(evidence, now=0.0)
    assert (c.rank, c.reason) == (1, "error") and "Cuda failure 1" in c.detail


def test_duplicate_gpu_at_join_names_the_rank_with_nccls_words():
    handles = []
    for i in range(2):
        placed = Placed(f"node-{i}", f"id{i}", "10.0.0.1", f"h{i}", (str(i),), "cuda:0", None, i)
        h = RankHandle(actor=None, placed=placed)
        h.ctx = type("Ctx", (), {"rank": i})()  # only .rank is read
        handles.append(h)
    answers = [("raised", wrapped(REMOTE_RESET)), ("raised", wrapped(DUPLICATE_GPU))]
    (c,) = join_culprits(handles, answers, 60)
    assert (c.rank, c.reason) == (1, "not joined") and "Duplicate GPU detected" in c.detail
