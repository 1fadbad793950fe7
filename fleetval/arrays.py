"""Array helpers: numpy <-> Arrow through the buffers, group-bys and segment medians.

NOTE: numpy <-> Arrow through the buffers, not Array.to_numpy / pa.array / pa.scalar: each
of those imports pandas (~0.25 s) the first time, a third of a whole compare. So values go
through these helpers, and Python scalars in compute calls through `arrow([x])[0]`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NUMPY_OF = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
    pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64,
}  # fmt: skip


_ARROW_OF = {np.dtype(v): k for k, v in _NUMPY_OF.items()}


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    if buffer is None:
        return np.ones(n, bool)
    bits = np.frombuffer(buffer, np.uint8)
    return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].astype(bool)


def np_col(column: pa.ChunkedArray | pa.Array, *, null: float = np.nan) -> np.ndarray:
    """A numeric or boolean column as numpy; nulls become `null` (NaN: integers become floats).

    Read from the Arrow buffers (a view where it can be); other types through to_numpy.
    """
    col = one_chunk(column)
    dtype = _NUMPY_OF.get(col.type)
    n, off = len(col), col.offset
    if dtype is None and not pa.types.is_boolean(col.type):
        return col.to_numpy(zero_copy_only=False)
    if n == 0:
        return np.zeros(0, dtype or bool)
    buffers = col.buffers()
    if dtype is None:
        values = _bits(buffers[1], off, n)
    else:
        values = np.frombuffer(buffers[1], dtype, count=off + n)[off:]
    if not col.null_count:
        return values
    valid = _bits(buffers[0], off, n)
    if np.isnan(null) or dtype is None:  # NaN needs floats; so do boolean nulls
        values = values.astype(float)
    return np.where(valid, values, null)


def arrow(
    values: np.ndarray | list,
    type: pa.DataType | None = None,
    *,
    nan_is_null: bool = False,
    valid: np.ndarray | None = None,
) -> pa.Array:
    """A numpy array (or a list of numbers, booleans or strings) as Arrow; null where `valid`
    is False, and with `nan_is_null` where NaN (as pa.array(..., from_pandas=True))."""
    strings = isinstance(values, list) and any(isinstance(v, str) for v in values)
    if strings or type == pa.string():
        return _strings(list(values))
    x = np.asarray(values)
    n = len(x)
    if x.dtype == bool or type == pa.bool_():
        packed = np.packbits(x.astype(bool), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(packed)])
    if type is None:
        type = _ARROW_OF[np.dtype(x.dtype)] if x.dtype != object else pa.float64()
    x = np.ascontiguousarray(x, dtype=_NUMPY_OF[type])
    if nan_is_null and x.dtype.kind == "f":
        valid = ~np.isnan(x) if valid is None else valid & ~np.isnan(x)
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(x)])


def _strings(values: list[str | None]) -> pa.Array:
    data = [v.encode() if v is not None else b"" for v in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    offsets[1:] = np.cumsum([len(b) for b in data])
    valid = np.array([v is not None for v in values])
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)


def one_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def equals(column: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """Rows of a (dictionary or plain) string column equal to value, as numpy bools."""
    col = one_chunk(column)
    if pa.types.is_dictionary(col.type):
        hits = np.flatnonzero(np.array(col.dictionary.to_pylist(), dtype=object) == value)
        return np.isin(np_col(col.indices, null=-1), hits)
    return np_col(pc.is_in(col, value_set=arrow([value])))  # a null is not equal


def plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded to plain values (for small key tables)."""
    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Dense integer codes of a column (null is its own code) and how many there can be."""
    col = one_chunk(column)
    if pa.types.is_integer(col.type) and col.null_count == 0 and len(col):
        v = np_col(col).astype(np.int64)
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 1 << 16:
            return v - lo, hi - lo + 1
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    card = len(col.dictionary) + 1
    return np_col(col.indices, null=card - 1).astype(np.int64), card


def group_rows(table: pa.Table, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row -> group id (groups ordered by key codes, so deterministic) and each group's first row.

    NOTE: combined integer codes and a bincount-sized table instead of a hash group-by:
    the key columns arrive dictionary-encoded, so this is a few passes over int arrays.
    """
    n = len(table)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    code, span = np.zeros(n, dtype=np.int64), 1
    for c in cols:
        idx, card = _codes(table[c])
        if span * card >= 1 << 62:  # re-densify before the combined code could overflow
            code, first = _dense(code, span)
            span = len(first)
        code += idx * span
        span *= card
    return _dense(code, span)


def _dense(code: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(code, return_index=True, return_inverse=True)'s inverse and index (codes
    in [0, span)), cheaper: a counting pass over the span when it is small, else an
    unstable sort; each group's first row by a minimum."""
    n = len(code)
    if span <= 4 * n:
        present = np.zeros(span, bool)
        present[code] = True
        rank = np.cumsum(present, dtype=np.int32 if span < 1 << 31 else np.int64) - 1
        grp = rank[code].astype(np.int64)
        groups = int(rank[-1]) + 1
    else:
        order = np.argsort(code)
        ranked = code[order]
        new = np.empty(n, bool)
        new[0] = True
        np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
        grp = np.empty(n, np.int64)
        grp[order] = np.cumsum(new) - 1
        groups = int(grp[order[-1]]) + 1
    first = np.full(groups, n, np.int64)
    np.minimum.at(first, grp, np.arange(n))
    return grp, first


def _by_segment_then_value(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """np.lexsort((values, seg)) at a third of the cost: the values sorted, then a stable
    radix sort (numpy's for 16-bit keys) on the segment ids, 16 bits at a time."""
    order = np.argsort(values)
    key = seg[order]
    top, shift = int(key.max(initial=0)), 0
    while True:
        step = np.argsort(((key >> shift) & 0xFFFF).astype(np.uint16), kind="stable")
        order, key = order[step], key[step]
        shift += 16
        if top >> shift == 0:
            return order


def segment_median(values: np.ndarray, seg: np.ndarray, nseg: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact median per segment id (NaN for empty ones) and the segment sizes."""
    n = np.bincount(seg, minlength=nseg)
    s = np.cumsum(n) - n
    v = values[_by_segment_then_value(values, seg)]
    med = np.full(nseg, np.nan)
    ok = n > 0
    med[ok] = (v[s[ok] + (n[ok] - 1) // 2] + v[s[ok] + n[ok] // 2]) / 2
    return med, n


def dict_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """A column's dictionary codes (null: -1) and its dictionary values."""
    col = one_chunk(column)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    names = col.dictionary.to_pylist()
    if col.null_count == len(col):  # NOTE: e.g. `metric` of timed rows: skip the fill
        return np.full(len(col), -1, np.int64), names
    return np_col(col.indices, null=-1).astype(np.int64), names


def _first_seen(codes: np.ndarray, names: list) -> pa.DictionaryArray:
    """Codes into names (-1: null) as a dictionary array, its dictionary as
    pc.dictionary_encode would make it from the plain values: each value once (equal names
    share a code), in order of first appearance."""
    n, unique = len(codes), {}
    name_id = [unique.setdefault(x, len(unique)) for x in names]
    ids = codes if len(unique) == len(names) else np.array([*name_id, -1], np.int64)[codes]
    valid = ids >= 0
    everywhere = bool(valid.all())
    first = np.full(len(unique), n, np.int64)
    if everywhere:
        np.minimum.at(first, ids, np.arange(n))
    else:
        np.minimum.at(first, ids[valid], np.flatnonzero(valid))
    used = np.flatnonzero(first < n)
    order = used[np.argsort(first[used])]
    if not np.array_equal(order, np.arange(len(unique))):  # else: already so
        remap = np.zeros(len(unique) + 1, np.int64)  # the last for -1
        remap[order] = np.arange(len(order))
        ids = remap[ids]
    indices = arrow(ids, pa.int32(), valid=None if everywhere else valid)
    values = list(unique)
    return pa.DictionaryArray.from_arrays(indices, arrow([values[o] for o in order], pa.string()))
