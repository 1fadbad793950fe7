"""Training step logs in the shapes training scripts print: one step per line, recognised
line by line, no format string asked for.

Read from each line: the rank (`[rank3]:` torchrun prefixes, `Rank 3`, `"rank": 3`), the host
(`[host Rank 0]`, `"host": ...`), a wall-clock time (`2025-06-16 22:30:50,322`, `[21:10:49]`,
`[2025-04-13 23:41:12]`, epoch seconds in JSON), the step (`step: 200`, `step=260`,
`iteration 10/ 1000`, `"step": 5`) and, where printed, its duration (`dt=8.90s`,
`elapsed time per iteration (ms): 1147.6`, `"step_time": 0.8`). A step with a time but no
duration gets one from the time since the same rank's previous step line.

Shapes recognised, each from real logs (tests/data/README.md): torchtitan
(`[rank0]:[titan] <time> - root - INFO - step: 200  loss: ...`), Megatron-LM
(`[<time>] iteration 10/ 1000 | ... | elapsed time per iteration (ms): 1147.6 |`), key=value
lines (`[21:10:49] [host Rank 0] epoch=0 step=260, loss=4.18, elapsed=233.3s, dt=8.90s`),
and JSON lines with `step` and `time`/`timestamp` or a duration key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_TORCHRUN = re.compile(r"^\[(?:rank|default)(\d+)\]:")
_RANK = re.compile(r"\b[Rr]ank[ _:=]?(\d+)\b")
_HOST_RANK = re.compile(r"\[([A-Za-z0-9][\w.-]*) [Rr]ank (\d+)\]")
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?")
_CLOCK = re.compile(r"^\s*\[(\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?\]")
_STEP = re.compile(r"\b(?:step|iteration|iter)\b\s*[:=]?\s*(\d+)", re.IGNORECASE)
_DURATION = re.compile(
    r"(?:\bdt|\bstep[_ ]time|\biter[_ ]time|elapsed time per iteration)\s*(\((ms|s)\))?\s*[:=]\s*"
    r"([0-9]*\.?[0-9]+)\s*(ms|s)?\b",
    re.IGNORECASE,
)
_JSON_TIME = ("time", "timestamp", "ts", "wall_time")
_JSON_DURATION = {"dt": 1.0, "step_time": 1.0, "step_time_s": 1.0, "iter_time": 1.0,
                  "step_time_ms": 1e-3, "elapsed_time_per_iteration_ms": 1e-3}  # fmt: skip


@dataclass(frozen=True)
class StepLine:
    """One step of one rank (or of the job, where the log names no rank)."""

    step: int
    time_s: float | None  # wall clock, seconds since the epoch (or of the day: `[21:10:49]`)
    duration_s: float | None
    rank: int | None
    host: str | None
    line: int  # 1-based, in its file


def _time(line: str) -> float | None:
    m = _DATETIME.search(line)
    if m:
        frac = m.group(3) or "0"
        t = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
        return t.timestamp() + float(f"0.{frac}")
    m = _CLOCK.match(line)
    if m:
        h, mi, s = (int(x) for x in m.group(1).split(":"))
        return h * 3600 + mi * 60 + s + float(f"0.{m.group(2) or '0'}")
    return None


def _duration(line: str) -> float | None:
    m = _DURATION.search(line)
    if not m:
        return None
    unit = m.group(2) or m.group(4) or "s"
    return float(m.group(3)) * (1e-3 if unit == "ms" else 1.0)


def _text_line(line: str, n: int, file_rank: int | None) -> StepLine | None:
    body = _TORCHRUN.sub("", line)
    step = _STEP.search(body)
    if not step:
        return None
    host = None
    rank: int | None = file_rank
    m = _TORCHRUN.match(line)
    hr = _HOST_RANK.search(line)
    if m:
        rank = int(m.group(1))
    elif hr:
        host, rank = hr.group(1), int(hr.group(2))
    elif r := _RANK.search(body[: step.start()]):
        rank = int(r.group(1))
    t, dt = _time(body), _duration(body)
    if t is None and dt is None:
        return None  # a step number alone is not a step line ("step 3 of the recipe")
    return StepLine(int(step.group(1)), t, dt, rank, host, n)


def _json_line(doc: dict[str, Any], n: int, file_rank: int | None) -> StepLine | None:
    step = doc.get("step", doc.get("iteration"))
    if not isinstance(step, int):
        return None
    t = next((doc[k] for k in _JSON_TIME if isinstance(doc.get(k), int | float)), None)
    if t is None:
        t = next((_time(doc[k]) for k in _JSON_TIME if isinstance(doc.get(k), str)), None)
    dt = next(
        (
            float(doc[k]) * f
            for k, f in _JSON_DURATION.items()
            if isinstance(doc.get(k), int | float)
        ),
        None,
    )
    if t is None and dt is None:
        return None
    rank = doc.get("rank", file_rank)
    host = doc.get("host") or doc.get("hostname")
    return StepLine(step, t, dt, rank if isinstance(rank, int) else None,
                    str(host) if host else None, n)  # fmt: skip


def parse(text: str, *, file_rank: int | None = None) -> list[StepLine]:
    """Every step line of a log, in file order; lines of other kinds are skipped."""
    out: list[StepLine] = []
    seen: set[tuple[int | None, int]] = set()
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        found = None
        if s.startswith("{") and s.endswith("}"):
            try:
                doc = json.loads(s)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                found = _json_line(doc, n, file_rank)
        else:
            found = _text_line(line, n, file_rank)
        if found and (found.rank, found.step) not in seen:
            seen.add((found.rank, found.step))  # "step: 200", then "traces at step 200"
            out.append(found)
    return _fill_durations(out)


def _fill_durations(lines: list[StepLine]) -> list[StepLine]:
    """A step line without a duration: the time since the same rank's previous step line,
    per step between them (a log that prints every 10th step)."""
    last: dict[int | None, StepLine] = {}
    out = []
    for s in lines:
        prev = last.get(s.rank)
        if s.duration_s is None and prev and s.time_s is not None and prev.time_s is not None:
            steps = s.step - prev.step
            if steps > 0 and s.time_s >= prev.time_s:
                s = StepLine(s.step, s.time_s, (s.time_s - prev.time_s) / steps, s.rank,
                             s.host, s.line)  # fmt: skip
        last[s.rank] = s
        out.append(s)
    return out


def file_rank(path: Path) -> int | None:
    """`rank3.log`, `train_rank_3.txt`, `worker-3.log`: the rank a per-rank log names."""
    m = re.search(r"(?:rank|worker|proc)[_-]?(\d+)", path.stem, re.IGNORECASE)
    return int(m.group(1)) if m else None


def read(path: Path) -> list[StepLine]:
    return parse(path.read_text(errors="replace"), file_rank=file_rank(path))
