"""`gpu_model` patterns a suite declares (busbw minimums, micro-benchmark expectations).

A suite is user input, and a pattern is searched in every node's GPU model on every report:
a regular expression that does not compile would end a run or a report in a traceback, and
one that backtracks exponentially (`(.*){20}!`) would stall the whole process, the service's
event loop and scheduler included. So a pattern is checked when the suite is parsed: short,
it compiles, no backreference, and no quantifier over anything but one character (a literal,
`.`, a class) with at most `MAX_REPEATS` of them. With the subject cut to
`MAX_SUBJECT` characters, a search is then polynomial and small: `H100(?!.*(PCIe|NVL))`,
`MI300X|MI325X` and `A100.*SXM` pass; `(a+)+`, `(.*){20}` and `(x|x)*` do not.
"""

from __future__ import annotations

import re
from re import _constants as sre  # NOTE: the stdlib's own parse tree of a pattern
from re import _parser
from typing import Annotated, Any

from pydantic import AfterValidator

MAX_PATTERN = 128  # characters in a pattern
MAX_SUBJECT = 128  # characters of a GPU model searched (real names are under 40)
MAX_REPEATS = 2  # quantifiers that repeat more than once (`*`, `+`, `{m,n}`) in one pattern
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT}
_ONE_CHAR = {sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.CATEGORY}
_BACKREFS = {sre.GROUPREF, sre.GROUPREF_EXISTS}


def _nodes(tree: Any) -> list[tuple[Any, Any]]:
    """Every (op, argument) of a parsed pattern, depth first."""
    out = []
    for op, av in tree:
        out.append((op, av))
        children: list[Any] = []
        if op in _REPEATS:
            children = [av[2]]
        elif op == sre.SUBPATTERN:
            children = [av[3]]
        elif op == sre.BRANCH:
            children = list(av[1])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            children = [av[1]]
        elif op == sre.ATOMIC_GROUP:
            children = [av]
        for child in children:
            out += _nodes(child)
    return out


def check_model_pattern(pattern: str) -> str:
    """The pattern, or ValueError saying what makes it unsafe to search."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a GPU model pattern has at most {MAX_PATTERN} characters")
    try:
        tree = _parser.parse(pattern)
    except re.error as err:
        raise ValueError(f"{pattern!r} is not a regular expression: {err}") from None
    nodes = _nodes(tree)
    if any(op in _BACKREFS for op, _ in nodes):
        raise ValueError(f"{pattern!r}: backreferences are not allowed in a GPU model pattern")
    repeats = [av for op, av in nodes if op in _REPEATS]
    for _lo, _hi, body in repeats:
        if len(body) != 1 or body[0][0] not in _ONE_CHAR:
            raise ValueError(
                f"{pattern!r}: a quantifier may repeat one character or class only (it may "
                "backtrack for ever otherwise); write e.g. `H100.*SXM` or `MI300X|MI325X`"
            )
    if sum(1 for _lo, hi, _ in repeats if hi > 1) > MAX_REPEATS:
        raise ValueError(f"{pattern!r}: at most {MAX_REPEATS} quantifiers (*, +, {{m,n}})")
    return pattern


# A suite's `gpu_model`: a checked regular expression, searched case-insensitively.
ModelPattern = Annotated[str, AfterValidator(check_model_pattern)]


def model_matches(pattern: str, model: str) -> bool:
    """Whether a checked pattern is found in a GPU model (case-insensitive)."""
    return re.search(pattern, model[:MAX_SUBJECT], re.IGNORECASE) is not None
