"""Per-node environment fingerprint: what a measurement ran on (driver, CUDA/ROCm, NCCL/RCCL, ...).

`fingerprint()` never raises: a missing tool or file gives None. The parsers are pure
functions over tool output so tests feed them captured (golden) text.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Required, TypedDict, TypeVar, cast

from fleetval.formats.smi import SmiError
from fleetval.formats.smi import parse_amd_smi_static as parse_amd_smi_static
from fleetval.formats.smi import parse_rocm_smi as parse_rocm_smi
from fleetval.store.schema import FINGERPRINT_COLUMNS

TOOL_TIMEOUT_S = 5.0
NVIDIA_QUERY = "index,name,uuid,pci.bus_id,driver_version,memory.total"
# Env vars worth keeping with the fingerprint: device visibility and collective tuning.
ENV_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "MIOPEN_", "TORCH_NCCL_", "FI_", "UCX_")
# The variables CPU math libraries size their thread pools by (a rank sets them: run.ranksettings)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", *THREAD_VARS)

FINGERPRINT_KEYS = FINGERPRINT_COLUMNS

T = TypeVar("T")


class Fingerprint(TypedDict):
    """A node's fingerprint: its row of the nodes table but what the driver adds (run_id, node,
    ray_node_id); one key per FINGERPRINT_COLUMNS column, in its order, None where unknown."""

    hostname: str
    node_ip: str | None
    gpu_model: str | None
    gpu_count: int
    gpu_ids: list[str]  # UUIDs or PCI bus ids
    driver_version: str | None
    cuda_version: str | None
    rocm_version: str | None
    hip_version: str | None
    nccl_version: str | None
    rccl_version: str | None
    torch_version: str | None
    ray_version: str | None
    python_version: str
    kernel: str
    cpu_model: str | None
    extra: str  # JSON: the facts without a column of their own


class Lscpu(TypedDict, total=False):
    """What plain `lscpu` says (empty where it could not be run)."""

    cpu_model: str | None
    cpus: int | None
    sockets: int | None
    numa_nodes: int | None
    numa_cpus: dict[int, str]  # NUMA node -> its CPU list


class GpuId(TypedDict, total=False):
    """A GPU as the vendor tool (or torch) names it."""

    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    model: str | None  # the normalised SKU (amd-smi, rocm-smi)
    gfx: str | None


class GpuTool(TypedDict, total=False):
    """What the vendor tool said of the node beside its GPUs."""

    source: Required[str | None]  # nvidia-smi, amd-smi, rocm-smi; None: no tool answered
    driver_version: str | None
    cuda_version: str | None
    topo: dict[str, dict[str, str | None]]  # nvidia-smi topo -m, per GPU


class TorchInfo(TypedDict, total=False):
    """Versions and visible devices as torch sees them (empty without torch)."""

    torch_version: str
    torch_cuda_version: str | None
    hip_version: str | None
    gpus: list[GpuId]
    collective_version: str | None  # the loaded NCCL/RCCL's own, else the header's
    collective_header_version: str | None
    collective_library: str | None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---- pure parsers -------------------------------------------------------------------------


def _na(value: str) -> str | None:
    v = value.strip()
    return None if v in {"", "N/A", "[N/A]", "[Not Supported]", "None"} else v


def parse_nvidia_smi_query(text: str) -> list[dict[str, str | None]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv` (with its header line).

    Header names lose their unit suffix ("memory.total [MiB]" -> "memory.total").
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    keys = [re.sub(r"\s*\[.*\]$", "", k.strip()) for k in lines[0].split(",")]
    rows = []
    for line in lines[1:]:
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(keys):
            rows.append({k: _na(v) for k, v in zip(keys, values, strict=True)})
    return rows


def parse_nvidia_smi_header(text: str) -> dict[str, str | None]:
    """Driver and CUDA (driver API) versions from the banner of plain `nvidia-smi`."""
    driver = re.search(r"Driver Version:\s*([\w.\-]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\w.\-]+)", text)
    return {
        "driver_version": driver.group(1) if driver else None,
        "cuda_version": cuda.group(1) if cuda else None,
    }


def parse_nvidia_smi_topo(text: str) -> dict[str, dict[str, str | None]]:
    """Per-GPU CPU and NUMA affinity from `nvidia-smi topo -m`."""
    rows = [_ANSI.sub("", ln).rstrip("\n") for ln in text.splitlines()]
    header = next((r for r in rows if "CPU Affinity" in r), None)
    if header is None:
        return {}
    cols = [c.strip() for c in header.split("\t")]
    out: dict[str, dict[str, str | None]] = {}
    for row in rows[rows.index(header) + 1 :]:
        if not re.match(r"^GPU\d+\t", row):
            continue
        cells = [c.strip() for c in row.split("\t")]
        # NOTE: the header has one leading empty cell where rows have the GPU name.
        cell = dict(zip(cols[1:], cells[1:], strict=False))
        out[cells[0]] = {
            "cpu_affinity": _na(cell.get("CPU Affinity", "")),
            "numa_affinity": _na(cell.get("NUMA Affinity", "")),
        }
    return out


def parse_lscpu(text: str) -> Lscpu:
    """CPU model, socket/CPU counts and NUMA node CPU lists from plain `lscpu`."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    numa = {
        int(m.group(1)): v
        for k, v in fields.items()
        if (m := re.fullmatch(r"NUMA node(\d+) CPU\(s\)", k))
    }
    return Lscpu(
        cpu_model=fields.get("Model name"),
        cpus=_int(fields.get("CPU(s)")),
        sockets=_int(fields.get("Socket(s)")),
        numa_nodes=_int(fields.get("NUMA node(s)")),
        numa_cpus=numa,
    )


def parse_cpuinfo(text: str) -> str | None:
    """First `model name` of /proc/cpuinfo (x86), else the ARM `Hardware`/`CPU part` hint."""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            return m.group(1).strip()
    return None


def parse_cpulist(text: str) -> set[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: set[int]) -> str:
    """The inverse of parse_cpulist: {0, 1, 2, 3, 8} -> "0-3,8"."""
    parts, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def normalize_pci_id(bus_id: str) -> str:
    """nvidia-smi's "00000000:00:06.0" as sysfs names it: "0000:00:06.0"."""
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id)
    if not m:
        return bus_id.lower()
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def version_string(v: Any) -> str | None:
    """torch.cuda.nccl.version()'s (2, 28, 9) or legacy int 22809 as "2.28.9"."""
    if v is None:
        return None
    if isinstance(v, tuple | list):
        return ".".join(str(x) for x in v[:3]) + (f"-{v[3]}" if len(v) > 3 else "")
    if isinstance(v, int):
        major, rest = divmod(v, 10000) if v >= 10000 else divmod(v, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(v)


_COLLECTIVE_LIB = re.compile(r"(/\S*lib[rn]ccl\.so[\w.]*)$")


def loaded_collective_libraries(maps: str) -> list[str]:
    """Paths of the NCCL/RCCL shared libraries mapped into a process (/proc/PID/maps text)."""
    seen: list[str] = []
    for line in maps.splitlines():
        m = _COLLECTIVE_LIB.search(line.strip())
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# ---- thin I/O -----------------------------------------------------------------------------


def run_tool(*argv: str, timeout_s: float = TOOL_TIMEOUT_S) -> str | None:
    """stdout of a tool, or None when it is absent, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def read_text(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def node_ip() -> str | None:
    """The address other nodes reach us on: the source address of a route outward.

    NOTE: connect() on a UDP socket sends nothing; it only asks the kernel for a route,
    so this works without network access (it fails only without any default route).
    """
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("8.8.8.8", 80))
        return s.getsockname()[0]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def numa_cpus(root: str = "/sys/devices/system/node") -> dict[int, set[int]]:
    """CPU set of every NUMA node, from sysfs."""
    out = {}
    for d in sorted(Path(root).glob("node[0-9]*")):
        text = read_text(d / "cpulist")
        if text is not None:
            out[int(d.name[4:])] = parse_cpulist(text)
    return out


def pci_numa_node(bus_id: str, root: str = "/sys/bus/pci/devices") -> int | None:
    """NUMA node of a PCI device (-1 from sysfs means the platform does not say)."""
    text = read_text(Path(root) / normalize_pci_id(bus_id) / "numa_node")
    return _int(text.strip()) if text else None


def node_gpus() -> tuple[list[GpuId], GpuTool]:
    """GPU rows and versions from nvidia-smi, else amd-smi, else rocm-smi."""
    query = run_tool("nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv")
    if query is not None:
        info = parse_nvidia_smi_header(run_tool("nvidia-smi") or "")
        topo = parse_nvidia_smi_topo(run_tool("nvidia-smi", "topo", "-m") or "")
        rows = parse_nvidia_smi_query(query)
        gpus = [
            GpuId(name=r.get("name"), uuid=r.get("uuid"), pci_bus_id=r.get("pci.bus_id"))
            for r in rows
        ]
        if rows and not info["driver_version"]:
            info["driver_version"] = rows[0].get("driver_version")
        return gpus, {**info, "topo": topo, "source": "nvidia-smi"}
    amd = run_tool("amd-smi", "static", "--asic", "--bus", "--driver", "--json")
    if amd is not None:
        try:
            parsed = parse_amd_smi_static(amd)
        except SmiError:
            parsed = {"gpus": [], "driver_version": None}
        return parsed["gpus"], {"driver_version": parsed["driver_version"], "source": "amd-smi"}
    rocm = run_tool(
        "rocm-smi",
        "--showproductname",
        "--showbus",
        "--showuniqueid",
        "--showdriverversion",
        "--json",
    )
    if rocm is not None:
        parsed = parse_rocm_smi(rocm)
        return parsed["gpus"], {"driver_version": parsed["driver_version"], "source": "rocm-smi"}
    return [], {"source": None}


def _torch_info() -> TorchInfo:
    """Versions and visible devices as torch sees them (torch imported lazily: the driver
    imports this module too and should not pay for CUDA initialisation unless asked)."""
    try:
        import torch
    except ImportError:
        return {}
    info = TorchInfo(
        # NOTE: str(): torch's TorchVersion pickles as itself, and unpickling it imports torch
        # in the driver (2-3 s per `fleetval run`; the service's process must not import it).
        torch_version=str(torch.__version__),
        torch_cuda_version=torch.version.cuda,
        hip_version=getattr(torch.version, "hip", None),
        gpus=[],
    )
    try:
        if not torch.cuda.is_available():
            return info
        header = version_string(torch.cuda.nccl.version())
        runtime, library = _guarded(runtime_collective_version, (None, None))
        info["collective_version"] = runtime or header
        info["collective_header_version"] = header
        info["collective_library"] = library
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uuid = getattr(p, "uuid", None)
            info["gpus"].append(GpuId(name=p.name, uuid=f"GPU-{uuid}" if uuid else None))
    except Exception:  # NOTE: a broken driver must not cost us the rest of the fingerprint
        pass
    return info


def runtime_collective_version() -> tuple[str | None, str | None]:
    """(version, library path) of the NCCL/RCCL actually loaded in this process, asked with
    its own ncclGetVersion; (None, None) when none is loaded (CPU build, or linked statically).

    NOTE: torch.cuda.nccl.version() is the header torch was compiled against; a node whose
    LD_LIBRARY_PATH or plugin setup loads another libnccl runs that one instead.
    """
    import ctypes

    for path in loaded_collective_libraries(read_text("/proc/self/maps") or ""):
        try:
            lib = ctypes.CDLL(path)
            out = ctypes.c_int(0)
            if lib.ncclGetVersion(ctypes.byref(out)) == 0 and out.value > 0:
                return version_string(out.value), path
        except (OSError, AttributeError):
            continue
    return None, None


def _rocm_version() -> str | None:
    root = os.environ.get("ROCM_PATH", "/opt/rocm")
    text = read_text(Path(root) / ".info" / "version")
    return text.strip() if text else None


def _cpu_model() -> tuple[str | None, Lscpu]:
    lscpu = parse_lscpu(run_tool("lscpu") or "")
    model = lscpu.get("cpu_model") or parse_cpuinfo(read_text("/proc/cpuinfo") or "")
    return model, lscpu


def _relevant_env() -> dict[str, str]:
    return {
        k: v for k, v in sorted(os.environ.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)
    }


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _ray_version() -> str | None:
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return None


def _guarded(probe: Callable[[], T], default: T) -> T:
    """probe(), or default if it raises: one broken source must not cost the rest."""
    try:
        return probe()
    except Exception:
        return default


def fingerprint() -> Fingerprint:
    """This node's environment, one value per NODES_SCHEMA column (None where unknown).

    Never raises: a fingerprint is evidence about a run, not a gate on it.
    """
    torch_info = _guarded(_torch_info, TorchInfo())
    gpus, tool = _guarded(node_gpus, ([], GpuTool(source=None)))
    cpu_model, lscpu = _guarded(_cpu_model, (None, Lscpu()))
    if not gpus:  # no vendor tool: fall back to what torch can see in this process
        gpus = torch_info.get("gpus", [])
    hip = torch_info.get("hip_version")
    fp = cast(Fingerprint, dict.fromkeys(FINGERPRINT_KEYS))
    fp.update(
        hostname=socket.gethostname(),
        node_ip=node_ip(),
        gpu_model=next((g["name"] for g in gpus if g.get("name")), None),
        gpu_count=len(gpus),
        gpu_ids=[i for g in gpus if (i := g.get("uuid") or g.get("pci_bus_id"))],
        driver_version=tool.get("driver_version"),
        # The driver's CUDA (nvidia-smi banner) bounds what runs; torch's runtime goes in extra.
        cuda_version=tool.get("cuda_version") or torch_info.get("torch_cuda_version"),
        rocm_version=None if tool["source"] == "nvidia-smi" else _guarded(_rocm_version, None),
        hip_version=hip,
        torch_version=torch_info.get("torch_version"),
        ray_version=_ray_version(),
        python_version=platform.python_version(),
        kernel=platform.release(),
        cpu_model=cpu_model,
    )
    # On ROCm builds torch.cuda.nccl reports the RCCL it links.
    fp["rccl_version" if hip else "nccl_version"] = torch_info.get("collective_version")
    fp["extra"] = _extra(tool, torch_info, gpus, lscpu)
    return fp


def _extra(tool: GpuTool, torch_info: TorchInfo, gpus: list[GpuId], lscpu: Lscpu) -> str:
    """JSON of the facts without a column of their own."""
    return json.dumps(
        {
            "gpu_tool": tool.get("source"),
            "torch_cuda_version": torch_info.get("torch_cuda_version"),
            # The nccl/rccl column is the loaded library's own version where it could be asked;
            # the header torch was built against is kept beside it.
            "collective_header_version": torch_info.get("collective_header_version"),
            "collective_library": torch_info.get("collective_library"),
            "cuda_driver_version": tool.get("cuda_version"),
            "gpu_pci_bus_ids": [g.get("pci_bus_id") for g in gpus],
            # the normalised SKU and gfx target: expectations are looked up by these
            "gpu_sku": next((g["model"] for g in gpus if g.get("model")), None),
            "gpu_gfx": next((g["gfx"] for g in gpus if g.get("gfx")), None),
            "nvidia_topo": tool.get("topo"),
            "cpus": os.cpu_count(),
            "sockets": lscpu.get("sockets"),
            "numa_nodes": {str(k): format_cpulist(v) for k, v in _guarded(numa_cpus, {}).items()}
            or None,
            "env": _relevant_env(),
            # The priority this process (a rank) ran at: Ray's default for workers is 15, at
            # which any normal-priority process on the host takes the CPU first.
            "niceness": os.nice(0),
            # ... its intra-op threads and the CPUs it could run on (run.ranksettings).
            "threads": _guarded(_torch_threads, None),
            "cpus_allowed": format_cpulist(os.sched_getaffinity(0)),
        },
        sort_keys=True,
        default=str,
    )
