"""What every command shares: the data-directory option, exit statuses, error printing.

Command modules import only typer, rich and pyarrow-free fleetval modules at import time:
`fleetval --help` and every command build all of them. What a command needs beyond that
(pyarrow, numpy, scipy, torch, ray, yaml, httpx) it imports inside the command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table

from fleetval.store.catalog import Catalog, default_data_dir

if TYPE_CHECKING:
    from fleetval.store.dataset import Store

# Off a terminal (a pipe, a CI log) no line is cut or wrapped: wider than any table or message.
PIPE_WIDTH = 100_000


class CliConsole(Console):
    """Rich tables at the terminal's width on a terminal; elsewhere (a pipe, a CI log) plain
    text at full width: tables as plain columns without a box, as nccl-tests prints them,
    nothing cut to "..." and no message wrapped, whatever COLUMNS says.

    NOTE: decided at each print, not at start: the stream may change under a test runner.
    Rich's TTY_COMPATIBLE=1 (or FORCE_COLOR) makes a pipe a terminal."""

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        return size if self.is_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: object, **kwargs: object) -> None:  # type: ignore[override]
        if not self.is_terminal:
            objects = tuple(self._plain(o) for o in objects)
            kwargs.setdefault("soft_wrap", True)
        super().print(*objects, **kwargs)  # type: ignore[arg-type]

    def _plain(self, obj: object) -> object:
        """A table as plain columns (no box, its title on the left); anything else as it is."""
        if isinstance(obj, Table):
            obj.box, obj.show_edge, obj.title_justify = None, False, "left"
        return obj


console = CliConsole()
err_console = CliConsole(stderr=True)


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # a check failed / a regression / sign-off failed
    BAD_INPUT = 2  # bad input or usage: nothing ran, nothing was lost
    UNJUDGED = 5  # the run judged nothing against an expectation (fleetval.status)


DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help="Data directory [default: $FLEETVAL_DATA, else ./fleetval-data]"),
]


AddressOpt = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster address [default: $RAY_ADDRESS, else embedded]"),
]


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for tools instead of a table")]


LabelOpt = Annotated[list[str], typer.Option("--label", help="KEY=VALUE, repeatable")]


StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Exit 1 on warnings too (default: warnings exit 0)")
]


def open_catalog(data: Path | None) -> Catalog:
    """The data directory's runs and nodes, listed without pyarrow (runs, baseline ...)."""
    return Catalog(data or default_data_dir())


def open_store(data: Path | None) -> Store:
    """The data directory with its Parquet tables (imports pyarrow)."""
    from fleetval.store.dataset import Store

    return Store(data or default_data_dir())


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn user-input errors (ValueError and its subclasses) into a message and exit 2."""
    try:
        yield
    except ValueError as err:
        err_console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from err


def command_group(help: str) -> typer.Typer:
    """A command with subcommands (`fleetval baseline set`): called bare, it prints its help."""
    return typer.Typer(help=help, no_args_is_help=True)


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A CLI choice type over a library registry's names: typer lists them in --help and
    rejects others (exit 2), and the library stays the one place that names them."""
    return StrEnum(name, [(v.upper(), v) for v in values])  # type: ignore[return-value]
