"""Parse an `NCCL_DEBUG=INFO` log (NCCL or RCCL) into what a health check needs to judge.

Both libraries prefix their lines `host:pid:tid [dev] NCCL INFO ...` (or `NCCL WARN`);
RCCL adds a banner (`RCCL version : ...`, `HIP version : ...`, `ROCm version : ...`).
The summary answers: which library and version, which net plugin and network were used,
over which interfaces/HCAs, with GPU Direct RDMA or not, through which transports, and
did communicator init complete or fail (and why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# ncclResult_t codes as printed in "file.cc:123 -> 5" error-propagation lines.
NCCL_RESULT = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
}

# "[timestamp] host:pid:tid [dev] file.cc:114 NCCL WARN ..." (timestamp and source optional)
_PREFIX = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<host>[\w.\-]+):\d+:\d+ \[[^\]]*\] "
    r"(?:[\w./]+:\d+ )?NCCL (?P<lvl>INFO|WARN) "
)
_IFACE = re.compile(r"\[\d+\]([\w.\-]+(?::\d+)?)")  # "[0]eth0:192.0.2.2<0>", "[1]mlx5_1:1/IB"
_VIA = re.compile(r"Channel \d+/\d+ :.* via ((?:P2P|SHM|NET|COLLNET)/.+?)(?: comm 0x|$)")
_ERROR_NAME = re.compile(
    r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|"
    r"InvalidArgument|InvalidUsage|RemoteError))\b"
)


@dataclass(frozen=True, kw_only=True)
class NcclLogSummary:
    """What one NCCL/RCCL debug log says about how communication was set up."""

    library: str | None = None  # "nccl" or "rccl"
    version: str | None = None  # "2.28.9"
    cuda_version: str | None = None  # from "NCCL version 2.28.9+cuda13.0"
    hip_version: str | None = None  # RCCL banner
    rocm_version: str | None = None  # RCCL banner
    hostname: str | None = None
    net_plugin: str | None = None  # "aws-ofi-rccl 1.4.0"; None: internal IB/Socket only
    net_plugin_missing: bool = False  # the loader looked for an external plugin and found none
    ofi_provider: str | None = None  # libfabric provider of the OFI plugin ("cxi", "efa")
    network: str | None = None  # "IB", "Socket", "AWS Libfabric" (from "Using network X")
    socket_interfaces: tuple[str, ...] = ()  # NET/Socket : Using [0]hsn0:... [1]hsn1:...
    ib_devices: tuple[str, ...] = ()  # NET/IB : Using [0]mlx5_0:1/IB ...
    gdr_enabled: bool | None = None  # True if any HCA/channel uses GPU Direct RDMA
    transports: tuple[str, ...] = ()  # "NET/IB", "P2P/IPC", "SHM/direct" from "via ..." lines
    channels: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    init_complete: bool = False
    warnings: tuple[str, ...] = ()  # NCCL WARN texts, in order, without duplicates
    errors: tuple[str, ...] = ()  # ncclResult names seen: "ncclInvalidUsage"

    @property
    def ok(self) -> bool:
        """Communicator init completed and nothing reported an error."""
        return self.init_complete and not self.errors


class _Acc:
    """Mutable accumulator while scanning; frozen into NcclLogSummary at the end."""

    def __init__(self) -> None:
        self.f: dict[str, object] = {}
        self.socket: list[str] = []
        self.ib: list[str] = []
        self.transports: set[str] = set()
        self.warnings: list[str] = []
        self.errors: list[str] = []
        self.gdr: list[bool] = []

    def set_once(self, key: str, value: object) -> None:
        self.f.setdefault(key, value)

    @staticmethod
    def add(seq: list[str], item: str) -> None:
        if item not in seq:
            seq.append(item)


def parse_nccl_log(text: str) -> NcclLogSummary:
    """Summarise a whole NCCL_DEBUG=INFO log (lines of other programs are skipped)."""
    acc = _Acc()
    for line in text.splitlines():
        m = _PREFIX.match(line)
        if m:
            acc.set_once("hostname", m.group("host"))
            body = line[m.end() :].strip()
            if m.group("lvl") == "WARN":
                acc.add(acc.warnings, body)
            else:
                _info(acc, body)
        # Error names also appear in the caller's exception text, when it shares the file.
        for name in _ERROR_NAME.findall(line):
            acc.add(acc.errors, name)
    return _freeze(acc)


def read_nccl_log(path: str | Path) -> NcclLogSummary | None:
    """The summary of a log file, or None when it cannot be read."""
    try:
        return parse_nccl_log(Path(path).read_text(errors="replace"))
    except OSError:
        return None


def _info(acc: _Acc, body: str) -> None:
    for parse in (_versions, _plugin, _network, _transport, _progress):
        if parse(acc, body):
            return


def _versions(acc: _Acc, body: str) -> bool:
    if m := re.match(r"RCCL version\s*:?\s*(\d+\.\d+\.\d+)(?:\+hip([\d.]+))?", body):
        acc.f["library"] = "rccl"
        acc.set_once("version", m.group(1))
        if m.group(2):
            acc.set_once("hip_version", m.group(2))
    elif m := re.match(r"NCCL version\s*:?\s*(\d+\.\d+\.\d+)(?:\+(cuda|hip)([\d.]+))?", body):
        acc.set_once("library", "rccl" if m.group(2) == "hip" else "nccl")
        acc.set_once("version", m.group(1))
        if m.group(2):
            acc.set_once(f"{m.group(2)}_version", m.group(3))
    elif m := re.match(r"HIP version\s*:\s*(\S+)", body):
        acc.f["hip_version"] = m.group(1)  # the banner is more precise than the "+hip" tag
    elif m := re.match(r"ROCm version\s*:\s*(\S+)", body):
        acc.f["rocm_version"] = m.group(1)
    else:
        return False
    return True


def _plugin(acc: _Acc, body: str) -> bool:
    if m := re.match(r"NET/OFI (?:Using|Initializing) (aws-ofi-[rn]ccl)\s+(\S+)", body):
        acc.f["net_plugin"] = f"{m.group(1)} {m.group(2)}"
    elif m := re.match(r"NET/OFI Selected [Pp]rovider is (\S+)", body):
        acc.set_once("ofi_provider", m.group(1).rstrip(","))
    elif m := re.match(r"NET/Plugin\s*:\s*Loaded net plugin (.+?)(?: \(v\d+\))?$", body):
        acc.set_once("net_plugin", m.group(1))
    elif re.match(
        r"NET/Plugin\s*:\s*(?:No plugin found|Could not find|Plugin load returned)", body
    ):
        acc.f["net_plugin_missing"] = True
    else:
        return False
    return True


def _network(acc: _Acc, body: str) -> bool:
    if m := re.match(r"Using network (.+)$", body):
        acc.f["network"] = m.group(1).strip()
    elif m := re.match(r"NET/Socket\s*:\s*Using (.*)$", body):
        for name in _IFACE.findall(m.group(1)):
            acc.add(acc.socket, name.split(":")[0])
    elif m := re.match(r"NET/IB\s*:\s*Using (.*?)(?:;|$)", body):
        for name in _IFACE.findall(m.group(1)):
            acc.add(acc.ib, name)
    elif m := re.search(r"GPU Direct RDMA (Enabled|Disabled)", body, re.IGNORECASE):
        acc.gdr.append(m.group(1).lower() == "enabled")
    else:
        return False
    return True


def _transport(acc: _Acc, body: str) -> bool:
    # NOTE: a net name may hold a space ("via NET/AWS Libfabric/0/GDRDMA"); RCCL appends
    # "comm 0x... nRanks N" after the path.
    if m := _VIA.match(body):
        path = m.group(1).strip().split("/")
        acc.transports.add("/".join(path[:2]))
        if "GDRDMA" in path:
            acc.gdr.append(True)
    elif m := re.match(r"Channel \d+/(\d+) :", body):
        acc.f["channels"] = max(int(m.group(1)), int(str(acc.f.get("channels", 0))))
    elif m := re.match(r"(\d+) coll channels", body):
        acc.f["channels"] = int(m.group(1))
    else:
        return False
    return True


def _progress(acc: _Acc, body: str) -> bool:
    if "Init COMPLETE" in body:
        acc.f["init_complete"] = True
    elif m := re.search(r"\bnRanks (\d+) nNodes (\d+)", body):
        acc.f["nranks"], acc.f["nnodes"] = int(m.group(1)), int(m.group(2))
    elif m := re.match(r"[\w./]+\.(?:cc|cpp|h):\d+ -> (\d+)", body):
        code = int(m.group(1))
        acc.add(acc.errors, NCCL_RESULT.get(code, f"ncclResult {code}"))
    else:
        return False
    return True


def _freeze(acc: _Acc) -> NcclLogSummary:
    return NcclLogSummary(
        **acc.f,
        socket_interfaces=tuple(acc.socket),
        ib_devices=tuple(acc.ib),
        gdr_enabled=any(acc.gdr) if acc.gdr else None,
        transports=tuple(sorted(acc.transports)),
        warnings=tuple(acc.warnings),
        errors=tuple(acc.errors),
    )
