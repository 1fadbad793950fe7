"""Text as people read it: sizes in their units, an error in one line."""


def human_bytes(n: int) -> str:
    """1048576 -> "1MiB"; sizes that are no whole unit stay in bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def short(err: BaseException | str) -> str:
    """The last non-empty line of an error (Ray wraps the original in a long traceback)."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]
