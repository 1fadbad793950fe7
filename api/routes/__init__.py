"""Every router of the app; a new route is one module here and one line in ROUTERS."""

from fleetval.api.routes import (
    attribute,
    baselines,
    compare,
    events,
    health,
    report,
    results,
    runs,
    schedules,
    stragglers,
    tokens,
)

ROUTERS = [
    health.router,
    runs.router,
    events.router,
    results.router,
    baselines.router,
    compare.router,
    attribute.router,
    stragglers.router,
    report.router,
    tokens.router,
    schedules.router,
]
