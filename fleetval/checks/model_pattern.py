"""`gpu_model` patterns a suite declares (busbw minimums, micro-benchmark expectations).

A suite is user input, and a pattern is searched in every node's GPU model on every report:
a pattern that backtracks (`(.?){40}!`) would hold the interpreter for seconds to forever,
the service's event loop and scheduler with it. So every pattern is matched by RE2
(`google-re2`), whose time is linear in the subject whatever the pattern, and checked when
the suite is parsed (a clear 422 or exit 2 rather than a failure at report time): at most
`MAX_PATTERN` characters, RE2 syntax (no backreferences, no lookaround).

One form of lookaround is kept, because a SKU is often named by what its model does *not*
say: a pattern may end in one negative lookahead `(?!.*X)`, as in `H100(?!.*(PCIe|NVL))`.
It means what Python's `re` means by it (some match of the head is not followed by X) and
is matched as two RE2 searches: the head's last possible end, then X after it.
"""

from __future__ import annotations

import functools
from typing import Annotated

import re2
from pydantic import AfterValidator

MAX_PATTERN = 128  # characters in a pattern
MAX_SUBJECT = 128  # characters of a GPU model searched (real names are under 40)
_NOT_FOLLOWED = "(?!.*"  # the one lookaround kept: a trailing `(?!.*X)`


@functools.cache
def _options(*, longest: bool) -> re2.Options:
    opts = re2.Options()
    opts.case_sensitive = False
    opts.log_errors = False  # NOTE: RE2 logs every parse error to stderr otherwise
    opts.longest_match = longest
    return opts


def _compile(pattern: str, *, longest: bool = False) -> re2._Regexp:
    try:
        return re2.compile(pattern, _options(longest=longest))
    except re2.error as err:
        why = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
        raise ValueError(why) from None


@functools.lru_cache(maxsize=1024)
def _split(pattern: str) -> tuple[re2._Regexp, re2._Regexp | None]:
    """(the head, searched so that its last end is found; X of a trailing `(?!.*X)` or None)."""
    if pattern.endswith(")"):
        at = pattern.find(_NOT_FOLLOWED)
        while at >= 0:
            head, tail = pattern[:at], pattern[at + len(_NOT_FOLLOWED) : -1]
            try:  # NOTE: only the split where both sides are RE2 is the real one
                return _compile(f"(?s:.*)(?:{head})", longest=True), _compile(tail)
            except ValueError:
                at = pattern.find(_NOT_FOLLOWED, at + 1)
    try:
        return _compile(f"(?s:.*)(?:{pattern})", longest=True), None
    except ValueError as err:
        lookaround = "(?=" in pattern or "(?!" in pattern or "(?<" in pattern
        hint = (
            " (lookaround is not supported, except one `(?!.*X)` at the very end)"
            if lookaround
            else ""
        )
        raise ValueError(f"{pattern!r} is not an RE2 regular expression: {err}{hint}") from None


def check_model_pattern(pattern: str) -> str:
    """The pattern, or ValueError saying why it cannot be searched."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a GPU model pattern has at most {MAX_PATTERN} characters")
    _split(pattern)
    return pattern


# A suite's `gpu_model`: an RE2 regular expression, searched case-insensitively.
ModelPattern = Annotated[str, AfterValidator(check_model_pattern)]


def model_matches(pattern: str, model: str) -> bool:
    """Whether a checked pattern is found in a GPU model (case-insensitive), in linear time."""
    head, not_followed = _split(pattern)
    subject = model[:MAX_SUBJECT]
    # NOTE: with leftmost-longest semantics, `.*HEAD` anchored at 0 ends where the last
    # possible match of HEAD ends; X absent after that end is X absent after some end.
    found = head.match(subject)
    if found is None or not_followed is None:
        return found is not None
    end = found.end()
    line_end = subject.find("\n", end)  # `.` in `(?!.*X)` stops at a newline
    return not_followed.search(subject, end, len(subject) if line_end < 0 else line_end) is None
