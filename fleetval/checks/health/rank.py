"""Health: is this node and rank set up the way fast, correct collectives need?

Each finding is one row (`metric` names the finding, `status` judges it, `message` says
why in plain words). The judging functions below take plain values so tests drive every
PASS/WARN/FAIL/SKIP without a GPU; `run_health` only gathers those values.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fleetval.checks import environment
from fleetval.checks.base import CheckContext
from fleetval.checks.health.hardware import (
    NODE_METRIC,
    node_hardware_rows,
    read_node_hardware,
)
from fleetval.checks.health.params import HealthParams
from fleetval.finding import RowFinding
from fleetval.formats.nccllog import NcclLogSummary, network_family, parse_nccl_log
from fleetval.store.schema import Row
from fleetval.text import short
from fleetval.vocab import Status

GIB = 1024**3
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")  # NCCL_NET_GDR_LEVEL names, nearest first
VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
# Set by the rank actor at each join: the file NCCL logs to in this process (it opens it once,
# at its first init, so a pooled rank's later jobs log there too) and its size before the job.
NCCL_LOG_VAR = "FLEETVAL_NCCL_LOG"
NCCL_LOG_OFFSET_VAR = "FLEETVAL_NCCL_LOG_OFFSET"


# ---- pure judgements ----------------------------------------------------------------------


def no_evidence(metric: str, declared: str, why: str, *, optional: bool) -> RowFinding:
    """A declared expectation with nothing to judge it by: FAIL, or SKIP where the suite
    marked it optional."""
    if optional:
        return RowFinding(metric, Status.SKIP, f"{why} ({declared}: optional in this suite)")
    hint = f"list {declared.split('=')[0]} under `optional:` to accept that"
    return RowFinding(metric, Status.FAIL, f"{declared} declared, but no evidence: {why}; {hint}")


def unread(metric: str, key: str, expected: str | None, why: str, *, optional: bool) -> RowFinding:
    """Nothing to read: SKIP where the suite expects nothing of it (`key` unset), else
    `no_evidence` for the expectation declared."""
    if expected is None:
        return RowFinding(metric, Status.SKIP, why)
    return no_evidence(metric, f"{key}={expected}", why, optional=optional)


def device_list(value: str) -> list[str]:
    """Entries of a *_VISIBLE_DEVICES value ("" means no device at all)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def judge_visible_devices(env: Mapping[str, str], device_count: int, *, rocm: bool) -> RowFinding:
    """The visibility variables name exactly the devices torch sees."""
    m = "visible_devices"
    # HIP applies HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) on top of ROCR_VISIBLE_DEVICES.
    inner_var = next((v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in env), None)
    if not rocm:
        inner_var = "CUDA_VISIBLE_DEVICES" if "CUDA_VISIBLE_DEVICES" in env else None
    outer_var = "ROCR_VISIBLE_DEVICES" if rocm and "ROCR_VISIBLE_DEVICES" in env else None
    details = {v: env[v] for v in VISIBLE_VARS if v in env}
    n = float(device_count)
    if inner_var is None and outer_var is None:
        if device_count > 1:
            return RowFinding(
                m,
                Status.WARN,
                f"no visibility variable set: this rank sees all {device_count} GPUs, "
                "so ranks may end up sharing one",
                n,
                "devices",
                details,
            )
        return RowFinding(
            m, Status.PASS, f"no visibility variable set; {device_count} device(s)", n
        )
    if inner_var and outer_var:
        outer = device_list(env[outer_var])
        beyond = [i for i in device_list(env[inner_var]) if i.isdigit() and int(i) >= len(outer)]
        if beyond:
            return RowFinding(
                m,
                Status.FAIL,
                f"{inner_var}={env[inner_var]} indexes past {outer_var}={env[outer_var]} "
                f"({len(outer)} devices): the inner list counts within the outer one",
                n,
                "devices",
                details,
            )
    var = inner_var or outer_var or ""
    named = len(device_list(env[var]))
    if named != device_count:
        return RowFinding(
            m,
            Status.FAIL,
            f"{var}={env[var]!r} names {named} device(s) but torch sees {device_count}",
            n,
            "devices",
            details,
        )
    return RowFinding(
        m,
        Status.PASS,
        f"{var}={env[var]}: torch sees {device_count} device(s)",
        n,
        "devices",
        details,
    )


def judge_gpu_count(
    found: int | None, expected: int | None, source: str | None, *, optional: bool = False
) -> RowFinding:
    """The node has the number of GPUs the suite expects."""
    m = "gpu_count"
    if found is None:
        why = "no GPU tool answered (nvidia-smi, amd-smi, rocm-smi)"
        if expected is None:
            return RowFinding(m, Status.SKIP, why)
        return no_evidence(m, f"expect_gpus_per_node={expected}", why, optional=optional)
    if expected is None:
        return RowFinding(
            m, Status.INFO, f"expect_gpus_per_node not set; {source} lists {found}", found, "gpus"
        )
    if found < expected:
        status, word = Status.FAIL, "fewer"
    elif found > expected:
        status, word = Status.WARN, "more"
    else:
        return RowFinding(m, Status.PASS, f"{found} GPUs ({source})", found, "gpus")
    return RowFinding(
        m,
        status,
        f"{source} lists {found} GPUs, {word} than the {expected} expected",
        found,
        "gpus",
    )


def judge_cpu_affinity(
    affinity: set[int], gpu_node: int | None, numa_cpus: Mapping[int, set[int]]
) -> RowFinding:
    """The rank's CPUs are on its GPU's NUMA node (host staging stays on-socket)."""
    m = "cpu_affinity_numa"
    mine = environment.format_cpulist(affinity)
    if len(numa_cpus) <= 1:
        return RowFinding(m, Status.PASS, f"one NUMA node: CPUs {mine} are all local")
    if gpu_node is None or gpu_node < 0 or gpu_node not in numa_cpus:
        return RowFinding(m, Status.SKIP, "the platform does not report the GPU's NUMA node")
    local = numa_cpus[gpu_node]
    where = f"the GPU's NUMA node {gpu_node} (CPUs {environment.format_cpulist(local)})"
    details = {"affinity": mine, "gpu_numa_node": gpu_node}
    if affinity <= local:
        return RowFinding(m, Status.PASS, f"CPUs {mine} are on {where}", gpu_node, None, details)
    if not affinity & local:
        return RowFinding(
            m, Status.FAIL, f"pinned to CPUs {mine}, none on {where}", gpu_node, None, details
        )
    return RowFinding(
        m, Status.WARN, f"CPUs {mine} span NUMA nodes beyond {where}", gpu_node, None, details
    )


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def judge_nccl_version(
    version: str | None,
    minimum: str | None,
    library: str,
    *,
    why_none: str = "",
    optional: bool = False,
) -> RowFinding:
    """The NCCL/RCCL in use is known and not older than the suite's minimum."""
    m = "nccl_version"
    name = library.upper()
    if version is None:
        why = why_none or f"{name} version unknown (no GPU or no log)"
        return unread(m, "min_nccl_version", minimum, why, optional=optional)
    details = {"library": library, "version": version}
    if minimum is None:
        return RowFinding(
            m, Status.INFO, f"{name} {version} (no min_nccl_version)", details=details
        )
    if _version_tuple(version) < _version_tuple(minimum):
        return RowFinding(
            m, Status.FAIL, f"{name} {version} is older than the minimum {minimum}", details=details
        )
    return RowFinding(m, Status.PASS, f"{name} {version} >= {minimum}", details=details)


def parse_nccl_filter(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL's interface/HCA list syntax: `^` excludes, `=` matches exactly, else prefixes."""
    exclude = value.startswith("^")
    value = value.removeprefix("^")
    exact = value.startswith("=")
    names = [n.strip().split(":")[0] for n in value.removeprefix("=").split(",") if n.strip()]
    return exclude, exact, names


def _selected(value: str, available: set[str]) -> tuple[list[str], list[str]]:
    """(available names the filter selects, filter names matching nothing available)."""
    exclude, exact, names = parse_nccl_filter(value)

    def hit(dev: str, name: str) -> bool:
        return dev == name if exact else dev.startswith(name)

    chosen = sorted(d for d in available if any(hit(d, n) for n in names) != exclude)
    unmatched = [n for n in names if not any(hit(d, n) for d in available)]
    return chosen, unmatched


def _selects(
    m: str,
    var: str,
    value: str,
    chosen: list[str],
    unmatched: list[str],
    missing: str,
    details: dict[str, Any],
) -> RowFinding:
    """A filter that selects something: WARN where some of its names match nothing (an
    exclusion's may), else PASS, naming what it selects."""
    using = ", ".join(chosen)
    if unmatched and not value.startswith("^"):
        text = f"{var}={value}: {', '.join(unmatched)} {missing}; using {using}"
        return RowFinding(m, Status.WARN, text, details=details)
    return RowFinding(m, Status.PASS, f"{var}={value} selects {using}", details=details)


def judge_socket_ifname(
    value: str | None, interfaces: set[str], *, loopback_job: bool = False
) -> RowFinding:
    """NCCL_SOCKET_IFNAME selects interfaces that exist (and not only loopback, unless the
    job's ranks all meet on this node's loopback: `loopback_job`, where fleetval sets it)."""
    m = "nccl_env_socket_ifname"
    have = ", ".join(sorted(interfaces)) or "none"
    details = {"value": value, "interfaces": sorted(interfaces)}
    if not value:
        fast = sorted(i for i in interfaces if i.startswith("hsn"))
        other = sorted(i for i in interfaces - set(fast) if not i.startswith(("lo", "docker")))
        if fast and other:
            return RowFinding(
                m,
                Status.WARN,
                f"NCCL_SOCKET_IFNAME unset and {', '.join(fast)} sit beside {', '.join(other)}: "
                f"NCCL may pick the slow one; set NCCL_SOCKET_IFNAME={','.join(fast)}",
                details=details,
            )
        return RowFinding(m, Status.PASS, f"unset: NCCL picks among {have}", details=details)
    chosen, unmatched = _selected(value, interfaces)
    details["selected"] = chosen
    if not chosen:
        return RowFinding(
            m,
            Status.FAIL,
            f"NCCL_SOCKET_IFNAME={value} selects no interface on this node (have: {have})",
            details=details,
        )
    if chosen == ["lo"] and loopback_job:
        return RowFinding(
            m,
            Status.PASS,
            f"NCCL_SOCKET_IFNAME={value} selects only loopback, as fleetval sets it where a "
            "job's ranks meet on 127.0.0.1 (one node, e.g. the embedded local Ray)",
            details=details,
        )
    if chosen == ["lo"]:
        return RowFinding(
            m,
            Status.WARN,
            f"NCCL_SOCKET_IFNAME={value} selects only loopback: other nodes cannot connect",
            details=details,
        )
    return _selects(
        m, "NCCL_SOCKET_IFNAME", value, chosen, unmatched, "match no interface", details
    )


def judge_ib_hca(value: str | None, devices: set[str]) -> RowFinding:
    """NCCL_IB_HCA names InfiniBand devices present in /sys/class/infiniband."""
    m = "nccl_env_ib_hca"
    have = ", ".join(sorted(devices)) or "none"
    details = {"value": value, "devices": sorted(devices)}
    if not value:
        return RowFinding(
            m, Status.PASS, f"unset: NCCL uses any HCA (have: {have})", details=details
        )
    chosen, unmatched = _selected(value, devices)
    if not chosen:
        return RowFinding(
            m,
            Status.FAIL,
            f"NCCL_IB_HCA={value} selects no InfiniBand device on this node (have: {have})",
            details=details,
        )
    return _selects(m, "NCCL_IB_HCA", value, chosen, unmatched, "not present", details)


def judge_gdr_level(value: str | None) -> RowFinding:
    """NCCL_NET_GDR_LEVEL is a level NCCL understands."""
    m = "nccl_env_gdr_level"
    if not value:
        return RowFinding(m, Status.PASS, "unset: NCCL's default GPU Direct RDMA level")
    if value.upper() in GDR_LEVELS:
        return RowFinding(m, Status.PASS, f"NCCL_NET_GDR_LEVEL={value}")
    if value.isdigit() and int(value) <= 5:
        return RowFinding(
            m,
            Status.WARN,
            f"NCCL_NET_GDR_LEVEL={value}: numeric levels are "
            f"deprecated; use one of {', '.join(GDR_LEVELS)}",
        )
    return RowFinding(
        m,
        Status.FAIL,
        f"NCCL_NET_GDR_LEVEL={value} is not a level NCCL knows ({', '.join(GDR_LEVELS)})",
    )


def judge_transport(
    log: NcclLogSummary | None,
    *,
    why_none: str,
    multinode: bool,
    expect_network: str | None,
    optional: bool = False,
) -> RowFinding:
    """NCCL set up its communicator cleanly, over the network the suite expects."""
    m = "nccl_transport"
    if log is None:
        return unread(m, "expect_network", expect_network, why_none, optional=optional)
    details = asdict(log)
    via = log.network or "no network"
    if log.errors:
        last = f"; last warning: {log.warnings[-1]}" if log.warnings else ""
        return RowFinding(
            m, Status.FAIL, f"NCCL reported {', '.join(log.errors)}{last}", details=details
        )
    if expect_network and not network_matches(log, expect_network):
        return RowFinding(
            m, Status.FAIL, f"NCCL used {via}; the suite expects {expect_network}", details=details
        )
    if not log.init_complete:
        return RowFinding(
            m, Status.WARN, "the log shows no completed communicator init", details=details
        )
    summary = _transport_text(log)
    if multinode and log.network == "Socket":
        return RowFinding(
            m, Status.WARN, f"inter-node traffic goes over TCP sockets ({summary})", details=details
        )
    return RowFinding(m, Status.PASS, summary, details=details)


def network_matches(log: NcclLogSummary, expected: str) -> bool:
    """The log's network is the expected one, however NCCL named it: "IB" is met by IBext and
    IBext_v8 (the HPC-X plugin) and by RoCE HCAs; "RoCE" only by RoCE HCAs; "AWS Libfabric" by
    "Libfabric" (aws-ofi-nccl >= 1.9) and back."""
    want = expected.strip().lower()
    if want == "roce":
        return log.fabric == "RoCE"
    return (network_family(log.network) or "").lower() == (network_family(expected) or "").lower()


def _transport_text(log: NcclLogSummary) -> str:
    parts = [f"network {log.network or 'none'}"]
    if log.link_layer:
        parts.append(f"link {log.link_layer}" + (" with SHARP" if log.sharp else ""))
    over = log.ib_devices or log.socket_interfaces
    if over:
        parts.append("over " + ", ".join(over))
    if log.transports:
        parts.append("transports " + ", ".join(log.transports))
    if log.gdr_enabled is not None:
        parts.append("GDR " + ("enabled" if log.gdr_enabled else "disabled"))
    return "; ".join(parts)


def judge_net_plugin(
    log: NcclLogSummary | None,
    *,
    why_none: str,
    expect_plugin: str | None,
    optional: bool = False,
) -> RowFinding:
    """The external net plugin the fabric needs (e.g. aws-ofi-rccl on Slingshot) was loaded."""
    m = "net_plugin"
    if log is None:
        return unread(m, "expect_net_plugin", expect_plugin, why_none, optional=optional)
    details = {
        "net_plugin": log.net_plugin,
        "net_plugin_version": log.net_plugin_version,
        "net_plugin_path": log.net_plugin_path,
        "ofi_provider": log.ofi_provider,
    }
    found = log.net_plugin
    if expect_plugin and not (found or "").startswith(expect_plugin):
        got = found or "no external plugin (internal IB/Socket only)"
        return RowFinding(
            m, Status.FAIL, f"expected {expect_plugin}; NCCL loaded {got}", details=details
        )
    status = Status.PASS if expect_plugin else Status.INFO  # nothing declared: recorded only
    if found:
        provider = f" (provider {log.ofi_provider})" if log.ofi_provider else ""
        return RowFinding(m, status, f"{found}{provider}", details=details)
    return RowFinding(m, status, "no external net plugin: internal IB/Socket", details=details)


def judge_miopen_cache(rocm: bool, dirs: list[tuple[str, str, bool]]) -> RowFinding:
    """MIOpen's user db and kernel cache are writable (else every rank recompiles, or fails).

    `dirs`: (variable or "default", path, writable-or-creatable).
    """
    m = "miopen_cache"
    if not rocm:
        return RowFinding(m, Status.SKIP, "not a ROCm build of torch: MIOpen is not used")
    bad = [(var, path) for var, path, ok in dirs if not ok]
    details = {var: path for var, path, _ in dirs}
    if any(var != "default" for var, _ in bad):
        text = "; ".join(f"{var}={path}" for var, path in bad)
        return RowFinding(m, Status.FAIL, f"not writable: {text}", details=details)
    if bad:
        paths = ", ".join(path for _, path in bad)
        return RowFinding(
            m,
            Status.WARN,
            f"default MIOpen cache {paths} not writable; set "
            "MIOPEN_USER_DB_PATH and MIOPEN_CUSTOM_CACHE_DIR",
            details=details,
        )
    return RowFinding(
        m, Status.PASS, "writable: " + ", ".join(p for _, p, _ in dirs), details=details
    )


def judge_fine_grain_pcie(rocm: bool, value: str | None) -> RowFinding:
    """RCCL over PCIe wants HSA_FORCE_FINE_GRAIN_PCIE=1."""
    m = "rccl_fine_grain_pcie"
    if not rocm:
        return RowFinding(m, Status.SKIP, "not a ROCm build of torch")
    if value == "1":
        return RowFinding(m, Status.PASS, "HSA_FORCE_FINE_GRAIN_PCIE=1")
    shown = "unset" if value is None else f"={value}"
    return RowFinding(
        m,
        Status.WARN,
        f"HSA_FORCE_FINE_GRAIN_PCIE {shown}: RCCL may fall back to "
        "slower or unsafe paths over PCIe; set it to 1",
    )


def judge_kernel_args(rocm: bool, cmdline: str | None, required: list[str]) -> RowFinding:
    """The kernel command line has the IOMMU settings RCCL peer-to-peer needs."""
    m = "rccl_kernel_args"
    if not rocm:
        return RowFinding(m, Status.SKIP, "not a ROCm build of torch")
    if cmdline is None:
        return RowFinding(m, Status.SKIP, "/proc/cmdline is not readable")
    missing = [a for a in required if a not in cmdline.split()]
    if missing:
        return RowFinding(
            m,
            Status.WARN,
            f"kernel command line lacks {', '.join(missing)}: "
            "peer-to-peer transfers may hang or slow down",
        )
    return RowFinding(m, Status.PASS, "kernel command line has " + ", ".join(required))


def judge_required_env(env: Mapping[str, str], required: Mapping[str, str]) -> RowFinding:
    """Every variable the suite requires has exactly the required value."""
    m = "required_env"
    if not required:
        return RowFinding(m, Status.SKIP, "the suite requires no environment variables")
    wrong = [
        f"{k} is {'unset' if k not in env else repr(env[k])}, needs {v!r}"
        for k, v in required.items()
        if env.get(k) != v
    ]
    if wrong:
        return RowFinding(m, Status.FAIL, "; ".join(wrong), details={"required": dict(required)})
    return RowFinding(m, Status.PASS, f"{len(required)} variable(s) as required")


def judge_memory_balance(
    free: list[float | None], rank: int, warn_pct: float, fail_pct: float, what: str
) -> RowFinding:
    """This rank's free memory is within the suite's percentage of the median over ranks."""
    m = "memory_balance"
    mine = free[rank]
    known = [f for f in free if f is not None]
    if mine is None or not known:
        return RowFinding(m, Status.SKIP, f"rank {rank}: {what} could not be read")
    median = statistics.median(known)
    dev = 0.0 if median == 0 else (mine - median) / median * 100
    worst = max(
        (r for r, f in enumerate(free) if f is not None), key=lambda r: abs(free[r] - median)
    )
    details = {
        "free_gib_by_rank": free,
        "median_gib": median,
        "deviation_pct": round(dev, 2),
        "worst_rank": worst,
    }
    side = f"{abs(dev):.1f}% {'below' if dev < 0 else 'above'}" if round(dev, 1) else "at"
    text = (
        f"rank {rank}: {mine:.1f} GiB {what}, {side} the median {median:.1f} GiB "
        f"of {len(known)} rank(s)"
    )
    status = Status.PASS
    if abs(dev) > fail_pct:
        status = Status.FAIL
    elif abs(dev) > warn_pct:
        status = Status.WARN
    return RowFinding(m, status, text, mine, "GiB", details)


def expand_debug_file(value: str, hostname: str, pid: int) -> str:
    """NCCL_DEBUG_FILE with NCCL's placeholders filled: %h hostname, %p pid, %% a percent."""
    table = {"%h": hostname, "%p": str(pid), "%%": "%"}
    return re.sub(r"%[hp%]", lambda m: table[m.group(0)], value)


def nccl_log_path(raw: str, pid: int) -> str:
    """The file NCCL_DEBUG_FILE names in process `pid` on this host.

    NOTE: NCCL expands %h with the hostname cut at its first dot."""
    return expand_debug_file(raw, socket.gethostname().split(".")[0], pid)


def read_log_from(path: str, offset: int) -> NcclLogSummary | None:
    """The summary of what a log gained after `offset` bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return parse_nccl_log(text)


def collective_version_in_use(
    loaded: str | None, header: str | None, log: NcclLogSummary | None
) -> str | None:
    """The NCCL/RCCL version this rank runs: the loaded library's own answer, else its log's
    banner, else (statically linked) the header torch was built with."""
    return loaded or (log.version if log is not None else None) or header


def parse_meminfo_available(text: str) -> int | None:
    """MemAvailable of /proc/meminfo, in bytes."""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


# ---- thin I/O -----------------------------------------------------------------------------


def _is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def _listdir(path: str) -> set[str]:
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def _writable(path: Path) -> bool:
    """Writable, or creatable: its nearest existing ancestor is writable."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return os.access(path, os.W_OK)


def _miopen_dirs(env: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    home = Path(env.get("HOME", "~")).expanduser()
    defaults = {
        "MIOPEN_USER_DB_PATH": home / ".config" / "miopen",
        "MIOPEN_CUSTOM_CACHE_DIR": home / ".cache" / "miopen",
    }
    out = []
    for var, default in defaults.items():
        path = Path(env[var]) if env.get(var) else default
        out.append((var if env.get(var) else "default", str(path), _writable(path)))
    return out


def _device_index(ctx: CheckContext) -> int:
    return ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()


def _gpu_pci_id(ctx: CheckContext) -> str:
    p = torch.cuda.get_device_properties(_device_index(ctx))
    return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"


def _free_gib(ctx: CheckContext) -> float | None:
    """Free device memory on GPU; available RAM on a CPU rank."""
    if ctx.on_gpu:
        return torch.cuda.mem_get_info(ctx.device)[0] / GIB
    avail = parse_meminfo_available(environment.read_text("/proc/meminfo") or "")
    return avail / GIB if avail is not None else None


def _memory_balance(ctx: CheckContext, p: HealthParams) -> RowFinding:
    if not dist.is_available() or not dist.is_initialized():
        if ctx.rank.world_size == 1:
            return RowFinding("memory_balance", Status.SKIP, "one rank: nothing to compare")
        why = f"no process group in a job of {ctx.rank.world_size} ranks: nothing was compared"
        return RowFinding("memory_balance", Status.FAIL, why)
    mine, error = None, None
    try:
        mine = _free_gib(ctx)
    except Exception as e:  # NOTE: still join the gather below: the other ranks wait for this one
        error = e
    gathered: list[float | None] = [None] * ctx.rank.world_size
    ctx.enter("all_gather_object", 0)
    dist.all_gather_object(gathered, mine)  # NOTE: an error here is the check's: _safe FAILs it
    if error is not None:
        return _failed("memory_balance", error)
    what = "device memory free" if ctx.on_gpu else "host memory available"
    return judge_memory_balance(
        gathered, ctx.rank.rank, p.memory_balance_pct, p.memory_balance_fail_pct, what
    )


def _nccl_log(ctx: CheckContext) -> tuple[NcclLogSummary | None, str]:
    """This rank's NCCL log summary, or None and the reason there is none."""
    if ctx.rank.backend != "nccl":
        return None, f"no NCCL log: backend is {ctx.rank.backend}"
    path = os.environ.get(NCCL_LOG_VAR)
    if not path:
        raw = os.environ.get("NCCL_DEBUG_FILE")
        if not raw:
            return None, "no NCCL log: NCCL_DEBUG_FILE is not set"
        path = nccl_log_path(raw, os.getpid())
    # NOTE: from this job's join on: a pooled rank's file holds its earlier jobs' logs too
    offset = int(os.environ.get(NCCL_LOG_OFFSET_VAR) or 0)
    log = read_log_from(path, offset) if Path(path).is_file() else None
    return log, f"no NCCL log at {path}"


def _gpu_count(p: HealthParams) -> RowFinding:
    gpus, tool = environment.node_gpus()
    found = len(gpus) if tool["source"] else None
    optional = "expect_gpus_per_node" in p.optional
    return judge_gpu_count(found, p.expect_gpus_per_node, tool["source"], optional=optional)


def _affinity(ctx: CheckContext) -> RowFinding:
    if not ctx.on_gpu:
        return RowFinding("cpu_affinity_numa", Status.SKIP, "rank runs on cpu: no GPU NUMA node")
    node = environment.pci_numa_node(_gpu_pci_id(ctx))
    return judge_cpu_affinity(os.sched_getaffinity(0), node, environment.numa_cpus())


def _visible(ctx: CheckContext, rocm: bool) -> RowFinding:
    if not ctx.on_gpu:
        return RowFinding("visible_devices", Status.SKIP, "rank runs on cpu: no GPU to see")
    return judge_visible_devices(os.environ, torch.cuda.device_count(), rocm=rocm)


def _version(
    ctx: CheckContext, log: NcclLogSummary | None, p: HealthParams, rocm: bool
) -> RowFinding:
    library = "rccl" if rocm else "nccl"
    version, why = None, f"backend is {ctx.rank.backend}: no NCCL in use"
    if ctx.rank.backend == "nccl" and ctx.on_gpu:
        # NOTE: torch.cuda.nccl.version() is the header torch was built with; a node whose
        # LD_LIBRARY_PATH or plugin set-up loads another libnccl runs that one.
        loaded, _ = environment.runtime_collective_version()
        header = environment.version_string(torch.cuda.nccl.version())
        version = collective_version_in_use(loaded, header, log)
        why = ""
    optional = "min_nccl_version" in p.optional
    return judge_nccl_version(
        version or None, p.min_nccl_version, library, why_none=why, optional=optional
    )


def _failed(metric: str, error: BaseException) -> RowFinding:
    """An error inside a probe or the check's collective: a FAIL of that finding, with it."""
    return RowFinding(metric, Status.FAIL, f"probe failed: {type(error).__name__}: {short(error)}")


def _safe(metric: str, probe: Callable[..., RowFinding], *args: Any, **kwargs: Any) -> RowFinding:
    """A probe that raises becomes a FAIL row with its error: one broken probe must not hide
    the others, and an error is never a pass or a warning."""
    try:
        return probe(*args, **kwargs)
    except Exception as e:
        return _failed(metric, e)


def _rendezvous_on_loopback() -> bool:
    """Whether this job's group met on a loopback address (its TCP store's host): there
    fleetval.run.job.rank_env sets NCCL_SOCKET_IFNAME=lo itself."""
    import ipaddress

    try:
        store = dist.distributed_c10d._get_default_store()
        while hasattr(store, "underlying_store"):  # PrefixStore around the TCPStore
            store = store.underlying_store
        return ipaddress.ip_address(store.host).is_loopback
    except (AttributeError, RuntimeError, ValueError):  # no group, or not a TCP store
        return False


def run_health(ctx: CheckContext, p: HealthParams) -> list[Row]:
    """This rank's devices, CPU affinity, NCCL/RCCL set-up and memory are as the suite expects."""
    # The collective goes first: every rank reaches it whatever the local probes find, and
    # on nccl it creates the communicator, so the NCCL log read next holds its transport.
    findings = [_safe("memory_balance", _memory_balance, ctx, p)]
    log, why_none = _nccl_log(ctx)
    rocm, env = _is_rocm(), dict(os.environ)
    multinode = ctx.rank.world_size > ctx.rank.local_world_size
    on_loopback = not multinode and _rendezvous_on_loopback()
    findings += [
        _safe("visible_devices", _visible, ctx, rocm),
        _safe("cpu_affinity_numa", _affinity, ctx),
        _safe("nccl_version", _version, ctx, log, p, rocm),
        judge_socket_ifname(
            env.get("NCCL_SOCKET_IFNAME"), _listdir("/sys/class/net"), loopback_job=on_loopback
        ),
        judge_ib_hca(env.get("NCCL_IB_HCA"), _listdir("/sys/class/infiniband")),
        judge_gdr_level(env.get("NCCL_NET_GDR_LEVEL")),
        judge_transport(
            log,
            why_none=why_none,
            multinode=multinode,
            expect_network=p.expect_network,
            optional="expect_network" in p.optional,
        ),
        judge_net_plugin(
            log,
            why_none=why_none,
            expect_plugin=p.expect_net_plugin,
            optional="expect_net_plugin" in p.optional,
        ),
        judge_miopen_cache(rocm, _miopen_dirs(env) if rocm else []),
        judge_fine_grain_pcie(rocm, env.get("HSA_FORCE_FINE_GRAIN_PCIE")),
        judge_required_env(env, p.required_env),
    ]
    # Node-wide facts once per node (local rank 0), not once per GPU.
    if ctx.rank.local_rank == 0:
        findings += [
            _safe("gpu_count", _gpu_count, p),
            judge_kernel_args(rocm, environment.read_text("/proc/cmdline"), p.rocm_kernel_args),
        ]
    rows = [ctx.row(check=p.check, **f.fields()) for f in findings]
    if ctx.rank.local_rank == 0 and p.hardware_source != "off":
        rows += _safe_rows(ctx, p, _hardware_rows)
    return rows


def _hardware_rows(ctx: CheckContext, p: HealthParams) -> list[Row]:
    """The node's GPUs, read and judged once per node: one row per GPU, one for the node."""
    hw = read_node_hardware(p.hardware_source, p.hardware_captures, ctx.rank.node)
    out = []
    for fields in node_hardware_rows(hw, p.hardware, ctx.rank.node):
        device_id = fields.pop("device_id")
        out.append(replace(ctx.row(check=p.check, **fields), device_id=device_id))
    return out


def _safe_rows(
    ctx: CheckContext, p: HealthParams, probe: Callable[[CheckContext, HealthParams], list[Row]]
) -> list[Row]:
    try:
        return probe(ctx, p)
    except Exception as e:  # NOTE: a judging error FAILs its row; the other findings stand
        return [ctx.row(check=p.check, **_failed(NODE_METRIC, e).fields())]
