"""Each kind of output is named in one registry, and every offer of it reads that registry:
the CLI's `--format` and `--drain-format` choices, the service's OpenAPI document, the
report's suffixes, Accept types and pasted drain lists."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from fleetval.analysis.compare_settings import COMPARE_FORMATS, TREND_FORMATS
from fleetval.cli.app import app
from fleetval.cli.attribute_cmd import FORMATS as ATTRIBUTE_FORMATS
from fleetval.fleet.drain import FORMATS as DRAIN_WRITERS
from fleetval.fleet.drain import DrainForm
from fleetval.reports import REPORTS, ReportFormat, format_for_accept, format_for_path
from fleetval.signoff.sweep import DRAIN_FORMS, MARKDOWN_DRAIN_FORM
from fleetval.vocab import OutputFormat


def _choices(command: str, option: str) -> list[str]:
    """The choices the CLI offers for one command's option, as typer parses them."""
    cmd = typer.main.get_command(app)
    params = cmd.commands[command].params  # type: ignore[attr-defined]
    (param,) = [p for p in params if option in getattr(p, "opts", ())]
    return [str(c) for c in param.type_descriptor.choices]


@pytest.mark.parametrize(
    ("command", "offered"),
    [
        ("compare", COMPARE_FORMATS),
        ("trend", TREND_FORMATS),
        ("results", (OutputFormat.TABLE, OutputFormat.JSON, OutputFormat.CSV)),
        ("sweep", (OutputFormat.TABLE, OutputFormat.JSON)),
    ],
)
def test_the_cli_format_choices_are_the_output_registrys(
    command: str, offered: tuple[OutputFormat, ...]
) -> None:
    assert _choices(command, "--format") == [f.value for f in offered]
    assert set(offered) <= set(OutputFormat)


def test_attribute_offers_output_formats() -> None:
    """`attribute --format` is a plain string checked against its formats (its own message)."""
    assert all(isinstance(f, OutputFormat) for f in ATTRIBUTE_FORMATS)


def test_the_drain_form_choices_and_the_reports_forms_are_the_drain_registrys() -> None:
    assert _choices("sweep", "--drain-format") == list(DRAIN_WRITERS) == list(DrainForm)
    assert set(DRAIN_FORMS) <= set(DrainForm) and MARKDOWN_DRAIN_FORM in DRAIN_FORMS


def test_every_report_format_has_one_registry_entry_that_picks_it() -> None:
    assert list(REPORTS) == list(ReportFormat)
    for fmt, kind in REPORTS.items():
        assert {format_for_path(f"report{s}") for s in kind.suffixes} == {fmt}
        assert {format_for_accept(a) for a in kind.accepts} == {fmt}
    with pytest.raises(ValueError, match=r"\.html, \.md or \.json"):
        format_for_path("report.pdf")


def test_the_api_names_its_formats_from_the_registries(tmp_path: Path) -> None:
    from fleetval.api import Settings, create_app

    settings = Settings(data_dir=tmp_path, run_executor=False, run_scheduler=False)
    paths = create_app(settings).openapi()["paths"]
    report = paths["/v1/runs/{run_id}/report"]["get"]["responses"]["200"]["content"]
    assert set(report) == {k.media for k in REPORTS.values()}  # FastAPI orders them its way
    (fmt,) = [p for p in paths["/v1/runs/{run_id}/results"]["get"]["parameters"]
              if p["name"] == "format"]  # fmt: skip
    (enum,) = [s["enum"] for s in fmt["schema"]["anyOf"] if "enum" in s]
    assert enum == [OutputFormat.JSON, OutputFormat.PARQUET]
