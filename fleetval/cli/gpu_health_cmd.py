"""`fleetval gpu-health`: what captured nvidia-smi / amd-smi output and kernel logs say about
each GPU, with the action to take; the same reading and judging as the `health` check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fleetval.cli.common import Exit, JsonOpt, bad_input_exits, console


def gpu_health(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="nvidia-smi -q / -q -x / --query-gpu / nvlink -s|-e, amd-smi "
            "metric / xgmi (text or --json), dmesg or journalctl -k"
        ),
    ],
    expect_nvlinks: Annotated[
        int | None, typer.Option("--expect-nvlinks", min=1, help="NVLinks each GPU must have up")
    ] = None,
    expect_xgmi_links: Annotated[
        int | None, typer.Option("--expect-xgmi-links", min=1, help="XGMI peers each GPU reaches")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per GPU: each finding with its evidence, severity and recommended action. Exit 0 when
    nothing is found, 1 on a finding, 2 when a file is none of the formats read."""
    from fleetval.detect.hardware import HwThresholds, judge_node, node_action
    from fleetval.formats.hwcapture import read_capture_files

    with bad_input_exits():
        readings, events = read_capture_files(files)
    t = HwThresholds(expect_nvlinks=expect_nvlinks, expect_xgmi_links=expect_xgmi_links)
    verdicts = judge_node(readings, events, t)
    action, reason = node_action(verdicts)
    if as_json:
        typer.echo(json.dumps(_json(verdicts, action.value, reason), indent=2))
    else:
        _print(verdicts, action.value, reason)
    if any(v.bad for v in verdicts):
        raise typer.Exit(Exit.FAILED)


def _json(verdicts: list, action: str, reason: str) -> dict:
    return {
        "action": action,
        "reason": reason,
        "gpus": [
            {
                "gpu": v.label,
                "key": v.key,
                "action": v.action.value,
                "reading": v.reading.model_dump() if v.reading else None,
                "findings": [
                    {**f._asdict(), "severity": f.severity.value, "action": f.action.value}
                    for f in v.findings
                ],
            }
            for v in verdicts
        ],
    }


def _print(verdicts: list, action: str, reason: str) -> None:
    for v in verdicts:
        what = f"{v.reading.model} ({v.reading.source})" if v.reading and v.reading.model else (
            f"({v.reading.source})" if v.reading else "(kernel log)")  # fmt: skip
        console.print(f"{v.label} {what}: {v.action.value}", highlight=False, soft_wrap=True)
        for f in v.findings:
            console.print(f"  {f.severity.value:<4} {f.code}: {f.evidence}\n"
                          f"       -> {f.action.value}: {f.reason}",
                          highlight=False, soft_wrap=True)  # fmt: skip
    console.print(f"node: {action}" + (f" ({reason})" if reason else ""), highlight=False,
                  soft_wrap=True)  # fmt: skip
