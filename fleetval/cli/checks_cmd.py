"""`fleetval checks`: the registered checks, what each proves, and its suite keys."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from fleetval.cli.common import JsonOpt, console

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


def _default(field: FieldInfo) -> str:
    """The default as a suite would spell it (YAML-ish JSON), or `required`."""
    from pydantic import TypeAdapter  # NOTE: here: the other commands start without pydantic

    if field.is_required():
        return "required"
    value = TypeAdapter(field.annotation).dump_python(
        field.get_default(call_default_factory=True), mode="json"
    )
    return json.dumps(value)


def checks(as_json: JsonOpt = False) -> None:
    """List the checks a suite step can name, with their parameters and defaults."""
    from fleetval.checks import CHECKS
    from fleetval.checks.spec import StepSpec

    common = set(StepSpec.model_fields)
    params = {
        name: {
            key: _default(f) for key, f in check.params.model_fields.items() if key not in common
        }
        for name, check in CHECKS.items()
    }
    if as_json:
        doc = [{"check": name, "proves": check.doc, "parameters": params[name]}
               for name, check in CHECKS.items()]  # fmt: skip
        typer.echo(json.dumps({"checks": doc, "every_step": sorted(common - {"check"})}))
        return
    table = Table(title="checks (a suite step's `check:`)", show_lines=True)
    for col in ("check", "what it proves", "parameters: default"):
        table.add_column(col)
    for name, check in CHECKS.items():
        table.add_row(name, check.doc, "\n".join(f"{k}: {v}" for k, v in params[name].items()))
    console.print(table)
    console.print(f"every step also takes: {', '.join(sorted(common - {'check'}))}")
