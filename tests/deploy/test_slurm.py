"""deploy/slurm/fleetval.sbatch on a real one-node Slurm cluster: munged, slurmctld and slurmd on
localhost, started here from a slurm.conf of the test's own (its own ports, state and socket), so
nothing of the machine's own Slurm or Ray is touched.

The Slurm node is named `fvnode1`, not the machine's hostname: the rows must carry that name,
which only the `fleetval/node` label the script sets can give them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from fleetval.testing.net import free_port
from tests.helpers.tools import tool_missing

pytestmark = [pytest.mark.slow, pytest.mark.own_cluster]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "slurm" / "fleetval.sbatch"
NODE = "fvnode1"
TOOLS = ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _require_slurm() -> None:
    """CI must run this test (it installs slurm-wlm and munge and runs as root); elsewhere, skip."""
    missing = [t for t in TOOLS if shutil.which(t, path=SBIN) is None]
    root = os.geteuid() == 0
    if missing or not root:
        tool_missing(f"needs root and Debian's slurm-wlm + munge (scripts/setup.sh test):"
                     f" root={root}, missing={missing}")  # fmt: skip


def _ray_port() -> str:
    """A free port whose next two are free too: the script's GCS, client and agent ports."""
    while True:
        port = free_port()
        try:
            for p in (port + 1, port + 2):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
        except OSError:
            continue
        return str(port)


@dataclass
class Slurm:
    dir: Path
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            args, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=60
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: rc {done.returncode}: {done.stderr}")
        return done.stdout.strip()

    def wait_until(self, what: str, ok: Callable[[], str | bool], deadline_s: float) -> str | bool:
        end = time.monotonic() + deadline_s
        while not (value := ok()):
            if time.monotonic() > end:
                logs = "\n".join(p.read_text()[-2000:] for p in sorted(self.dir.glob("*.log")))
                raise AssertionError(f"{what}: not within {deadline_s:.0f} s\n{logs}")
            time.sleep(1)
        return value

    def sbatch(self, *args: str, env: dict[str, str]) -> str:
        """Submit the script; its Ray on ports free now (job ids restart with every cluster)."""
        out = f"--output={self.dir}/job-%j.out"
        env = {"RAY_PORT": _ray_port(), **env}
        return self.run("sbatch", "--parsable", "--nodes=1", out, str(SCRIPT), *args, env=env)

    def state(self, job: str) -> str:
        line = self.run("scontrol", "show", "job", job, check=False)
        return next((w.split("=", 1)[1] for w in line.split() if w.startswith("JobState=")), "")

    def wait_done(self, job: str, deadline_s: float) -> str:
        """The job's final state, once Slurm has also finished its clean-up (not COMPLETING)."""
        finals = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}

        def final() -> str:
            state = self.state(job)
            return state if state in finals and not self.run("squeue", "-h", "-j", job) else ""

        return str(self.wait_until(f"job {job} to end", final, deadline_s))

    def output(self, job: str) -> str:
        path = self.dir / f"job-{job}.out"
        return path.read_text() if path.exists() else ""


def _conf(d: Path) -> str:
    return f"""ClusterName=fvtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=15
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN
PartitionName=fv Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


def _stop(pid_file: Path, deadline_s: float = 20) -> None:
    """SIGTERM a daemon by its pid file; SIGKILL it past the deadline."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().split()[0])
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    _require_slurm()
    d = tmp_path_factory.mktemp("slurm")
    d.chmod(0o755)  # munged wants its socket's folder reachable by all
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    (d / "slurm.conf").write_text(_conf(d))
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, SBIN]),
        "SLURM_CONF": str(d / "slurm.conf"),
    }
    env.pop("RAY_ADDRESS", None)
    cluster = Slurm(d, env)
    key = d / "munge.key"
    cluster.run("mungekey", "--create", f"--keyfile={key}")
    munge = [f"--socket={d}/munge.sock", f"--key-file={key}", f"--pid-file={d}/munged.pid"]
    cluster.run("munged", "--force", *munge, f"--log-file={d}/munged.log", f"--seed-file={d}/seed")
    try:
        cluster.run("slurmctld")
        cluster.run("slurmd", "-N", NODE)
        cluster.wait_until(
            "the node to be idle",
            lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%T", check=False),
            60,
        )
        yield cluster
    finally:
        cluster.run("scancel", "--partition=fv", check=False)
        _stop(d / "slurmd.pid")
        _stop(d / "slurmctld.pid")
        cluster.run("munged", "--stop", f"--socket={d}/munge.sock", check=False)


def _ray_left(job: str) -> list[str]:
    """Processes of the job's Ray (its temp dir is in their command lines)."""
    mark = f"/tmp/fvray-{job}".encode()
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = cmdline.read_bytes()
        except OSError:
            continue  # gone meanwhile
        if mark in cmd:
            shown = cmd.replace(b"\0", b" ")[:120].decode(errors="replace")
            left.append(f"{cmdline.parent.name}: {shown}")
    return left


def _assert_ray_down(slurm: Slurm, job: str) -> None:
    slurm.wait_until(f"job {job}'s Ray processes to exit", lambda: not _ray_left(job) or "", 30)
    assert "fleetval: Ray taken down on " + NODE in slurm.output(job)
    assert not Path(f"/tmp/fvray-{job}").exists()


def test_sbatch_runs_smoke_with_slurm_node_names(slurm: Slurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    job = slurm.sbatch(
        "run", "smoke", "--label", "via=slurm",
        # RAY_worker_niceness unset (the tests set 0): the script's own default must hold
        env={"FLEETVAL_DATA": str(data), "RAY_START_ARGS": "--num-cpus=4", "RAY_worker_niceness": ""},
    )  # fmt: skip
    state = slurm.wait_done(job, deadline_s=300)
    out = slurm.output(job)
    assert state == "COMPLETED", out[-4000:]
    assert f"fleetval: 1 Ray node(s) up: {NODE}" in out
    assert "0 node(s) to drain" in out
    _assert_ray_down(slurm, job)

    # Read back without fleetval: the run passed, and every row names the Slurm node.
    runs = duckdb.sql(f"select run_id, suite, status from '{data}/runs/*.parquet'").fetchall()
    assert [(r[1], r[2]) for r in runs] == [("smoke", "pass")]
    rows = duckdb.sql(
        f"select node, status, count(*) from '{data}/results/*/*.parquet' group by all"
    ).df()
    assert set(rows["node"]) == {NODE}, rows
    assert rows["count_star()"].sum() > 0
    assert set(rows["status"]) <= {"pass", "info", "skip"}, rows
    # The ranks ran at normal priority (Ray's default for workers is nice 15).
    ((extra,),) = duckdb.sql(f"select extra from '{data}/nodes/*.parquet'").fetchall()
    assert json.loads(extra)["niceness"] == 0


def test_sbatch_prints_drain_commands_for_culprit_nodes(slurm: Slurm, tmp_path: Path) -> None:
    suite = tmp_path / "crash.yaml"
    suite.write_text(
        "name: crash\nplacement: {world_sizes: [2], strategy: PACK}\ntimeouts: {step_s: 60}\n"
        "steps:\n  - {name: correctness, check: collectives, size: 4KiB}\n"
        "faults:\n  - {kind: crash, rank: 1}\n"
    )
    job = slurm.sbatch(
        "run",
        str(suite),
        env={"FLEETVAL_DATA": str(tmp_path / "data"), "RAY_START_ARGS": "--num-cpus=2"},
    )
    state = slurm.wait_done(job, deadline_s=300)
    out = slurm.output(job)
    assert state == "FAILED", out[-4000:]  # fleetval run exits 1: a rank crashed
    drain = [line for line in out.splitlines() if line.startswith("scontrol update")]
    assert drain and all(f"NodeName={NODE} State=DRAIN" in line for line in drain), out[-4000:]
    assert "crash" in drain[0]
    _assert_ray_down(slurm, job)


def test_scancel_takes_ray_down(slurm: Slurm, tmp_path: Path) -> None:
    job = slurm.sbatch("run", "smoke", env={"FLEETVAL_DATA": str(tmp_path / "data")})
    slurm.wait_until("Ray to be up", lambda: "Ray node(s) up" in slurm.output(job), 240)
    slurm.run("scancel", job)
    assert slurm.wait_done(job, deadline_s=120) == "CANCELLED"
    _assert_ray_down(slurm, job)
