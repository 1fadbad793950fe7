"""`fleetval gpu-health`: what captured nvidia-smi / amd-smi output and kernel logs say about
each GPU, with the action to take; the same reading and judging as the `health` check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from fleetval.cli.common import DataOpt, Exit, JsonOpt, bad_input_exits, console, open_store

if TYPE_CHECKING:
    from fleetval.detect.hardware import GpuVerdict, GpuVerdictJSON

FilesArg = Annotated[
    list[Path],
    typer.Argument(
        help="nvidia-smi -q / -q -x / --query-gpu / nvlink -s|-e / topo -m, dcgmi diag / nvlink "
        "-s, amd-smi metric / xgmi, lspci -vv, dmesg or journalctl -k: whole or pasted blocks, "
        "several tools in one file, behind prompts, timestamps or srun/kubectl prefixes; a "
        "directory is one node (its name) holding such files, and several directories are "
        "also checked for firmware drift"
    ),
]


def gpu_health(
    files: FilesArg,
    expect_nvlinks: Annotated[
        int | None, typer.Option("--expect-nvlinks", min=1, help="NVLinks each GPU must have up")
    ] = None,
    expect_xgmi_links: Annotated[
        int | None, typer.Option("--expect-xgmi-links", min=1, help="XGMI peers each GPU reaches")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per GPU: each finding with its evidence, severity and recommended action. Exit 0 when
    nothing is found, 1 on a finding, 2 when a file holds no block of a tool fleetval reads."""
    from fleetval.detect.hardware import HwThresholds, judge_fleet
    from fleetval.formats.hwcapture import scan_files

    with bad_input_exits():
        found = {node: scan_files(paths) for node, paths in _nodes(files).items()}
    nodes = {n: (f.readings, f.events, f.observations) for n, f in found.items()}
    t = HwThresholds(expect_nvlinks=expect_nvlinks, expect_xgmi_links=expect_xgmi_links)
    verdicts = judge_fleet(nodes, t)
    blocks = {path: bs for f in found.values() for path, bs in f.blocks.items()}
    notes = _one_node_note(files)
    if as_json:
        out = _json(verdicts)
        out["blocks"] = {p: [b.__dict__ for b in bs] for p, bs in blocks.items()}
        out["notes"] = notes
        typer.echo(json.dumps(out, indent=2))
    else:
        for note in notes:
            console.print(f"note: {note}", highlight=False)
        _print_blocks(blocks)
        _print(verdicts)
    if any(v.bad for vs in verdicts.values() for v in vs):
        raise typer.Exit(Exit.FAILED)


ONE_NODE = "this node"  # the node plain files (not in a node's directory) are read as


def _nodes(paths: list[Path]) -> dict[str, list[Path]]:
    """Plain files are one node ("this node"); each directory is a node named by it."""
    out: dict[str, list[Path]] = {}
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file())
            if not found:
                raise ValueError(f"{p}: a node directory with no files")
            out[p.name] = found
        else:
            out.setdefault(ONE_NODE, []).append(p)
    return out


def _one_node_note(paths: list[Path]) -> list[str]:
    """Several plain files are read as one node's captures, its GPUs judged together (and
    against each other for drift): said, with how to name nodes apart."""
    plain = [p for p in paths if not p.is_dir()]
    if len(plain) < 2:
        return []
    return [
        f"{len(plain)} files read as one node ({ONE_NODE!r}): their GPUs are judged together, "
        "as one machine's; captures of several nodes go in one directory per node (the "
        "directory names the node)"
    ]


class GpuHealthJSON(TypedDict):
    """What `fleetval gpu-health --json` prints."""

    action: str  # the worst node's
    reason: str
    gpus: list[GpuVerdictJSON]
    nodes: dict[str, str]  # node -> its action


def _json(verdicts: dict[str, list[GpuVerdict]]) -> GpuHealthJSON:
    from fleetval.detect.hardware import node_action

    worst = _worst(verdicts)
    return GpuHealthJSON(
        action=worst[0],
        reason=worst[1],
        gpus=[v.to_json(node) for node, vs in verdicts.items() for v in vs],
        nodes={node: node_action(vs)[0].value for node, vs in verdicts.items()},
    )


def _worst(verdicts: dict[str, list[GpuVerdict]]) -> tuple[str, str]:
    from fleetval.detect.hardware import ACTION_RANK, node_action

    actions = [(node, *node_action(vs)) for node, vs in verdicts.items()]
    node, action, reason = max(actions, key=lambda a: ACTION_RANK[a[1]])
    prefix = f"{node}: " if len(verdicts) > 1 and reason else ""
    return action.value, prefix + reason


def _print_blocks(blocks: dict[str, list[Any]]) -> None:
    for path, bs in blocks.items():
        read = ", ".join(
            f"{b.kind} (lines {b.first}-{b.last}{', partial' if b.partial else ''})" for b in bs
        )
        console.print(f"{path}: {read}", highlight=False, soft_wrap=True)


def _print(verdicts: dict[str, list[GpuVerdict]]) -> None:
    from fleetval.detect.hardware import node_action

    for node, vs in verdicts.items():
        for v in vs:
            r = v.reading
            what = f" {r.model} ({r.source})" if r and r.model else f" ({r.source})" if r else ""
            console.print(f"{v.label}{what}: {v.action.value}", highlight=False, soft_wrap=True)
            for f in v.findings:
                console.print(
                    f"  {f.status.value:<4} {f.code}: {f.evidence}\n"
                    f"       -> {f.action.value}: {f.reason}",
                    highlight=False,
                    soft_wrap=True,
                )
        action, reason = node_action(vs)
        tail = f" ({reason})" if reason else ""
        console.print(f"node {node}: {action.value}{tail}", highlight=False, soft_wrap=True)


def gpu_watch(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """GPUs to watch before they fail: counters that grew between runs (corrected ECC, row
    remaps, retired pages, PCIe replays) and findings that came back, from the gpus table."""
    from fleetval.detect.hardware import watch_list

    with bad_input_exits():
        rows = open_store(data).gpus().to_pylist()
    items = watch_list(rows)
    if as_json:
        typer.echo(json.dumps([i._asdict() for i in items], indent=2))
        return
    for i in items:
        console.print(f"{i.node} {i.device_id}: {i.what} {i.evidence}", highlight=False,
                      soft_wrap=True)  # fmt: skip
    console.print(f"{len(items)} to watch over {len({(r['node'], r['device_id']) for r in rows})}"
                  " GPU(s)", highlight=False)  # fmt: skip
