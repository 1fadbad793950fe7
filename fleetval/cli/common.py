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
from rich.console import Console

from fleetval.store.catalog import Catalog, default_data_dir

if TYPE_CHECKING:
    from fleetval.store.dataset import Store

console = Console()
err_console = Console(stderr=True)


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
        err_console.print(f"[red]error:[/red] {err}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from err


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A CLI choice type over a library registry's names: typer lists them in --help and
    rejects others (exit 2), and the library stays the one place that names them."""
    return StrEnum(name, [(v.upper(), v) for v in values])  # type: ignore[return-value]
