"""The one name for a JSON object of no fixed shape: `JsonObject`.

Only at true JSON boundaries: a document parsed from text one part wrote and another reads
back (a row's check-specific details, a fault as a suite declared it, a run's summary), a
request body before its model parses it, an OpenAPI document. Where a shape is known it is
declared instead: a TypedDict for its JSON form, a dataclass or a pydantic model for the
value."""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
