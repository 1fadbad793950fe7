"""Row filters shared by `fleetval results` and the service's results route."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # NOTE: callers hold a table already; importing pyarrow here costs start-up
    import pyarrow as pa

# The columns a results query may filter on, as the CLI options and query parameters name them.
RESULT_FILTERS = ("step", "check", "collective", "rank", "node")


def filter_rows(table: pa.Table, filters: dict[str, object]) -> pa.Table:
    """Rows matching every given filter (None: not filtered); strings compare exactly, numbers
    as numbers, and a null never matches."""
    import numpy as np

    from fleetval.arrays import arrow, equals, np_col

    keep = np.ones(len(table), bool)
    for col, value in filters.items():
        if isinstance(value, str):
            keep &= equals(table[col], value)
        elif value is not None:
            keep &= np_col(table[col]) == value  # a null (NaN) is never equal
    return table if keep.all() else table.filter(arrow(keep))
