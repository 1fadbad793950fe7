"""What a hardware reader is, and the scan it reads into. A reader is one tool's output: its
kind (the name a person knows the output by) and `find`, which finds that tool's blocks in a
text, reads each, and adds what it read to the scan. `fleetval.formats.hwcapture.READERS`
lists them in the order they run; adding a reader is one module and one line there.

This module knows no reader, so each reader's module can import it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetval.formats.gpuhw import GpuReading, KernelEvent
from fleetval.formats.hwobs import Observation

_ELLIPSIS = re.compile(r"^\s*\.{3,}\s*$")


@dataclass(frozen=True)
class Block:
    """Where one tool's output lies in a text (1-based lines) and whether it was cut off."""

    kind: str
    first: int
    last: int
    partial: bool = False


@dataclass
class Scan:
    """One text being read: as given (kernel logs are matched with their prefixes), its lines
    without launcher prefixes, the kind that claimed the whole text (None: blocks only), and
    what the readers found so far."""

    text: str
    lines: list[str]
    whole: str | None = None
    blocks: list[Block] = field(default_factory=list)
    readings: list[GpuReading] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)

    @property
    def body(self) -> str:
        return "\n".join(self.lines)

    def add(self, kind: str, first: int, last: int, partial: bool = False) -> None:
        """A block from lines[first] to lines[last] (0-based)."""
        self.blocks.append(Block(kind, first + 1, last + 1, partial))

    def covered(self, i: int) -> bool:
        """Whether lines[i] lies in a block already found."""
        return any(b.first <= i + 1 <= b.last for b in self.blocks)


@dataclass(frozen=True)
class Reader:
    """One tool's output: its kind, and `find`, which reads every block of it into a scan."""

    kind: str
    find: Callable[[Scan], None]


def whole_reader(
    kind: str, claims: Callable[[str], bool], read: Callable[[str], list[GpuReading]]
) -> Reader:
    """A reader of a tool whose output is the whole text: the first such reader whose `claims`
    accepts the text reads all of it; later ones step aside."""

    def find(s: Scan) -> None:
        body = s.body
        if s.whole is None and claims(body):
            s.whole = kind
            s.readings += read(body)
            s.add(kind, 0, len(s.lines) - 1)

    return Reader(kind, find)


# ---- helpers the block finders share ----------------------------------------------------------


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def indented_below(lines: list[str], i: int) -> int:
    """The last line of the section that starts at lines[i] (lines indented deeper)."""
    j = i
    while j + 1 < len(lines) and lines[j + 1].strip() and indent(lines[j + 1]) > indent(lines[i]):
        j += 1
    return j


def is_ellipsis(line: str) -> bool:
    """A `...` line: the person who pasted the block left something out there."""
    return bool(_ELLIPSIS.match(line))
