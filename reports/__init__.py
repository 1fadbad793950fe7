"""Release sign-off reports (`fleetval report`, `GET /v1/runs/{id}/report`).

Packaged as `fleetval.reports` (setuptools package-dir), Jinja2 templates as package data.
`build_signoff` judges a run against its gates (fleetval/signoff/evaluate.py); `render` formats it.
"""

from fleetval.reports.render import (
    REPORTS,
    ReportFormat,
    format_for_accept,
    format_for_path,
    render,
    to_json,
)
from fleetval.signoff.evaluate import Signoff, build_signoff
from fleetval.signoff.gates import GateName, Waiver, parse_waiver
from fleetval.signoff.sweep import SWEEPS_SHOWN
from fleetval.store.dataset import Store
from fleetval.vocab import GateStatus


def render_for_accept(
    store: Store,
    run_id: str,
    accept: str | None,
    *,
    baseline: str | None = None,
    sweeps: int = SWEEPS_SHOWN,
) -> tuple[str, str]:
    """The service's one call: (body, media type) of a run's report, HTML unless `accept`
    asks for Markdown or JSON. ValueError (StoreError) for an unknown run or baseline."""
    fmt = format_for_accept(accept)
    signoff = build_signoff(store, run_id, baseline=baseline, sweeps=sweeps)
    return render(signoff, fmt), REPORTS[fmt].media_type


__all__ = [
    "REPORTS",
    "GateName",
    "GateStatus",
    "ReportFormat",
    "Signoff",
    "Waiver",
    "build_signoff",
    "format_for_accept",
    "format_for_path",
    "parse_waiver",
    "render",
    "render_for_accept",
    "to_json",
]
