"""Units as people read them."""


def human_bytes(n: int) -> str:
    """1048576 -> "1MiB"; sizes that are no whole unit stay in bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"

