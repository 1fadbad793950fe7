"""Parse an `NCCL_DEBUG=INFO` log (NCCL or RCCL) into what a health check needs to judge.

Both libraries prefix their lines `host:pid:tid [dev] NCCL INFO ...` (or `NCCL WARN`), but logs
as fleets keep them carry more: a `[timestamp]`, an mpirun `[1,3]<stdout>:` tag, a log shipper's
`| timestamp |` columns, a WARN's source path (`.../comm-libs/rccl/.../init.cc:303`). Some lines
stand bare: `NCCL version 2.x.y+cudaA.B`, and RCCL's banner, printed as one message with embedded
newlines so that only its first line (if any) has the prefix (`RCCL version : ...`,
`HIP version  : ...`, `ROCm version : ...`, `Hostname : ...`).

The summary answers: which library and version, which net plugin (name, version, path) and
network were used, InfiniBand or RoCE, SHARP/CollNet or not, over which interfaces/HCAs, with
GPU Direct RDMA or not, through which transports, how many ranks on which hosts, and did
communicator init complete or fail (and why). `fleetval nccl-log` prints it; the health check
judges it.
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

# "host:pid:tid [dev] path/file.cc:114 NCCL WARN ..." anywhere in a line (whatever wraps it:
# timestamps, mpirun tags, shipper columns); the last one wins, since a shipper repeats the
# message after its own columns. Hosts may be redacted ("<cluster_name>").
_PREFIX = re.compile(
    r"(?P<host>[^\s:|\]\[]+):\d+:\d+ \[[^\]]*\] (?:\S+:\d+ )?NCCL (?P<lvl>INFO|WARN) "
)
_BARE_PREFIX = re.compile(r"^\s*NCCL (?P<lvl>INFO|WARN) ")  # a line pasted without its host part
# What wraps a bare line: mpirun's "[1,0]<stdout>:", a shipper's "  | 2025-...Z | ".
_WRAPPER = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\|\s*[\dT:.\-+Z ]+\|\s*)")
_BARE = re.compile(r"^(?:NCCL|RCCL) version\b")
_BANNER = re.compile(r"^(?:HIP|ROCm) version\s*:|^Hostname\s*:|^Librccl path\s*:")
_IFACE = re.compile(r"\[\d+\]([\w.\-]+(?::\d+)?)")  # "[0]eth0:192.0.2.2<0>"
_HCA = re.compile(r"\[\d+\]([\w.\-]+:\d+(?:/\w+)*)")  # "[1]mlx5_1:1/IB/SHARP", "[0]mlx5_0:1/RoCE"
_VIA = re.compile(
    r"(?:Channel|Ring) \d+(?:/\d+)? :.* via ((?:P2P|SHM|NET|COLLNET)/.+?)(?: comm 0x|$)"
)
_ERROR_NAME = re.compile(
    r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|"
    r"InvalidArgument|InvalidUsage|RemoteError))\b"
)


# Fabrics as `expect_network` names them, from what NCCL calls its network: the HPC-X plugin
# says IBext/IBext_v8 for InfiniBand (or RoCE) verbs; aws-ofi-nccl says "AWS Libfabric" or,
# since 1.9, "Libfabric".
_NETWORK_FAMILY = (
    (re.compile(r"^IB(?:ext(?:_v\d+)?)?$", re.IGNORECASE), "IB"),
    (re.compile(r"^(?:AWS )?Libfabric$", re.IGNORECASE), "Libfabric"),
)


def network_family(name: str | None) -> str | None:
    """ "IBext_v8" -> "IB", "AWS Libfabric" -> "Libfabric"; other names as they are."""
    if name is None:
        return None
    return next((fam for pat, fam in _NETWORK_FAMILY if pat.match(name.strip())), name.strip())


@dataclass(frozen=True, kw_only=True)
class NcclLogSummary:
    """What one NCCL/RCCL debug log says about how communication was set up."""

    library: str | None = None  # "nccl" or "rccl"
    version: str | None = None  # "2.28.9"
    cuda_version: str | None = None  # from "NCCL version 2.28.9+cuda13.0"
    cuda_driver_version: str | None = None  # "cudaDriverVersion 12060": the driver's CUDA, "12.6"
    hip_version: str | None = None  # RCCL banner
    rocm_version: str | None = None  # RCCL banner
    hostname: str | None = None
    hosts: tuple[str, ...] = ()  # every host whose lines the log holds, in order seen
    net_plugin: str | None = None  # "aws-ofi-rccl 1.4.0"; None: internal IB/Socket only
    net_plugin_version: str | None = None  # "1.14.0" where the plugin says it
    net_plugin_path: str | None = None  # HPC-X "Plugin Path : .../libnccl-net.so"
    net_plugin_missing: bool = False  # the loader looked for an external plugin and found none
    collnet_plugin: str | None = None  # "SHARP" from "Loaded collnet plugin SHARP"
    ofi_provider: str | None = None  # libfabric provider of the OFI plugin ("cxi", "efa")
    network: str | None = None  # as NCCL names it: "IB", "IBext_v8", "Socket", "Libfabric"
    link_layer: str | None = None  # "IB" or "RoCE", from the HCA suffixes
    sharp: bool = False  # SHARP HCAs, a SHARP collnet plugin, or CollNet channels in use
    socket_interfaces: tuple[str, ...] = ()  # NET/Socket : Using [0]hsn0:... [1]hsn1:...
    ib_devices: tuple[str, ...] = ()  # NET/IB : Using [0]mlx5_0:1/IB/SHARP ...
    gdr_enabled: bool | None = None  # True if any HCA/channel uses GPU Direct RDMA
    transports: tuple[str, ...] = ()  # "NET/IB", "P2P/IPC", "SHM/direct" from "via ..." lines
    channels: int | None = None
    collnet_channels: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    init_complete: bool = False
    warnings: tuple[str, ...] = ()  # NCCL WARN texts, in order, without duplicates
    errors: tuple[str, ...] = ()  # ncclResult names seen: "ncclInvalidUsage"

    @property
    def ok(self) -> bool:
        """Communicator init completed and nothing reported an error."""
        return self.init_complete and not self.errors

    @property
    def fabric(self) -> str | None:
        """The network's family, RoCE told apart from InfiniBand: "IB", "RoCE", "Socket", ..."""
        family = network_family(self.network)
        return "RoCE" if family == "IB" and self.link_layer == "RoCE" else family


class _Acc:
    """Mutable accumulator while scanning; frozen into NcclLogSummary at the end."""

    def __init__(self) -> None:
        self.f: dict[str, object] = {}
        self.hosts: list[str] = []
        self.socket: list[str] = []
        self.ib: list[str] = []
        self.transports: set[str] = set()
        self.warnings: list[str] = []
        self.errors: list[str] = []
        self.gdr: list[bool] = []
        self.banner = False  # inside RCCL's multi-line version banner

    def set_once(self, key: str, value: object) -> None:
        self.f.setdefault(key, value)

    @staticmethod
    def add(seq: list[str], item: str) -> None:
        if item not in seq:
            seq.append(item)


def cuda_api_version(code: int) -> str:
    """CUDA's integer version (cudaDriverGetVersion: 1000 * major + 10 * minor) as "12.6"."""
    return f"{code // 1000}.{code % 1000 // 10}"


def parse_nccl_log(text: str) -> NcclLogSummary:
    """Summarise a whole NCCL_DEBUG=INFO log (lines of other programs are skipped)."""
    acc = _Acc()
    for line in text.splitlines():
        _line(acc, line)
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


def _line(acc: _Acc, line: str) -> None:
    found = list(_PREFIX.finditer(line))
    if found:
        m = found[-1]
        acc.set_once("hostname", m.group("host"))
        acc.add(acc.hosts, m.group("host"))
    else:
        m = _BARE_PREFIX.match(line)
    if m:
        acc.banner = False
        body = line[m.end() :].strip()
        if m.group("lvl") == "WARN":
            acc.add(acc.warnings, body)
        else:
            _info(acc, body)
        return
    bare = _WRAPPER.sub("", line).strip()
    if _BARE.match(bare) or (acc.banner and _BANNER.match(bare)):
        _versions(acc, bare)


def _info(acc: _Acc, body: str) -> None:
    for parse in (_versions, _plugin, _network, _transport, _progress):
        if parse(acc, body):
            return


def _versions(acc: _Acc, body: str) -> bool:
    if m := re.match(r"RCCL version\s*:?\s*(\d+\.\d+\.\d+)(?:\+hip([\d.]+))?", body):
        acc.f["library"] = "rccl"
        acc.banner = True
        acc.set_once("version", m.group(1))
        if m.group(2):
            acc.set_once("hip_version", m.group(2))
    elif m := re.match(r"NCCL version\s*:?\s*(\d+\.\d+\.\d+)(?:\+(cuda|hip)([\d.]+))?", body):
        acc.set_once("library", "rccl" if m.group(2) == "hip" else "nccl")
        acc.set_once("version", m.group(1))
        if m.group(2):
            acc.set_once(f"{m.group(2)}_version", m.group(3))
    elif m := re.match(r"cudaDriverVersion (\d+)$", body):
        acc.set_once("cuda_driver_version", cuda_api_version(int(m.group(1))))
    elif m := re.match(r"HIP version\s*:\s*(\S+)", body):
        acc.f["hip_version"] = m.group(1)  # the banner is more precise than the "+hip" tag
    elif m := re.match(r"ROCm version\s*:\s*(\S+)", body):
        acc.f["rocm_version"] = m.group(1)
    elif m := re.match(r"Hostname\s*:\s*(\S+)", body):
        acc.set_once("hostname", m.group(1))
    else:
        return body.startswith("Librccl path")
    return True


def _plugin(acc: _Acc, body: str) -> bool:
    if m := re.match(r"NET/OFI (?:Using|Initializing) (aws-ofi-[rn]ccl)\s+v?(\S+)", body):
        acc.f["net_plugin"] = f"{m.group(1)} {m.group(2)}"
        acc.f["net_plugin_version"] = m.group(2)
    elif m := re.match(r"NET/OFI Selected [Pp]rovider is (\w[\w;-]*)", body):
        acc.set_once("ofi_provider", m.group(1))
        acc.set_once("net_plugin", "aws-ofi-nccl")  # only the OFI plugin says NET/OFI
    elif m := re.match(r"NET/Plugin\s*:\s*Loaded net plugin (.+?)(?: \(v\d+\))?$", body):
        acc.f["net_plugin"] = m.group(1)
    elif m := re.match(r"NET/Plugin\s*:\s*Loaded collnet plugin (.+?)(?: \(v\d+\))?$", body):
        acc.f["collnet_plugin"] = m.group(1)
    elif body.startswith("NET/OFI "):
        acc.set_once("net_plugin", "aws-ofi-nccl")  # its lines are there: the plugin is loaded
    elif m := re.match(r"Plugin Path\s*:\s*(\S+)", body):
        acc.f["net_plugin_path"] = m.group(1)
    elif m := re.match(r"P2P plugin (\S+)", body):
        acc.set_once("network", m.group(1))  # HPC-X: the plugin's name is the network's
    elif re.match(
        r"NET/Plugin\s*:\s*(?:No plugin found|Could not find|Plugin load returned|Plugin load \()",
        body,
    ) or re.search(r"No plugin found \(lib[rn]ccl-net", body):
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
        for name in _HCA.findall(m.group(1)):
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
    elif m := re.match(r"(\d+) coll channels, (?:(\d+) collnet channels)?", body):
        acc.f["channels"] = int(m.group(1))
        if m.group(2) is not None:
            acc.f["collnet_channels"] = int(m.group(2))
    else:
        return False
    return True


def _progress(acc: _Acc, body: str) -> bool:
    if "Init COMPLETE" in body:
        acc.f["init_complete"] = True
    elif m := re.search(r"\bnRanks (\d+) nNodes (\d+)", body):
        acc.f["nranks"], acc.f["nnodes"] = int(m.group(1)), int(m.group(2))
    elif m := re.search(r"CommInit\w* comm 0x[0-9a-f]+ rank \d+ nranks (\d+)", body):
        acc.set_once("nranks", int(m.group(1)))
    elif m := re.match(r"[\w./]+\.(?:cc|cpp|h):\d+ -> (\d+)", body):
        code = int(m.group(1))
        acc.add(acc.errors, NCCL_RESULT.get(code, f"ncclResult {code}"))
    else:
        return False
    return True


def _freeze(acc: _Acc) -> NcclLogSummary:
    f = acc.f
    if f.get("net_plugin") is None and f.get("net_plugin_path"):
        # HPC-X names only the file: ".../nccl_rdma_sharp_plugin/lib/libnccl-net.so"
        parts = Path(str(f["net_plugin_path"])).parts
        f["net_plugin"] = parts[-3] if len(parts) >= 3 else parts[-1]
    if f.get("library") == "rccl" and f.get("net_plugin") == "aws-ofi-nccl":
        f["net_plugin"] = "aws-ofi-rccl"  # named from its NET/OFI lines: RCCL's build of it
    nets = sorted(t.split("/", 1)[1] for t in acc.transports if t.startswith("NET/"))
    if f.get("network") is None and nets:
        f["network"] = nets[0]  # older logs say it only in "Ring ... via NET/AWS Libfabric/0"
    layers = {hca.split("/")[1] for hca in acc.ib if "/" in hca}
    sharp = (
        any(hca.endswith("/SHARP") for hca in acc.ib)
        or "SHARP" in str(f.get("collnet_plugin") or "").upper()
        or int(str(f.get("collnet_channels") or 0)) > 0
        or "COLLNET" in {t.split("/")[0] for t in acc.transports}
    )
    return NcclLogSummary(
        **f,
        hosts=tuple(acc.hosts),
        link_layer="RoCE" if "RoCE" in layers else ("IB" if "IB" in layers else None),
        sharp=sharp,
        socket_interfaces=tuple(acc.socket),
        ib_devices=tuple(acc.ib),
        gdr_enabled=any(acc.gdr) if acc.gdr else None,
        transports=tuple(sorted(acc.transports)),
        warnings=tuple(acc.warnings),
        errors=tuple(acc.errors),
    )
