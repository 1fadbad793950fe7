"""Parquet files of one table, read and written as the store needs them: fast to start.

NOTE: file by file with pyarrow.parquet, not pyarrow.dataset, and timestamps converted by
hand: both of those pyarrow paths import pandas (~0.4 s), and store-reading commands must
start fast.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetval.store.base import CorruptFile
from fleetval.store.records import StoredRow


class ParquetOptions(TypedDict):
    """`pyarrow.parquet.write_table`'s options the store writes with."""

    compression: str
    use_dictionary: list[str]
    use_byte_stream_split: list[str]


def parquet_options(schema: pa.Schema) -> ParquetOptions:
    """How the store encodes a table: dictionaries for strings only; floats (and float
    lists, the per-iteration samples) byte-stream-split, which zstd then compresses and
    which decodes ~40% faster than the default for timing data."""
    floats, strings = [], []
    for f in schema:
        if pa.types.is_floating(f.type):
            floats.append(f.name)
        elif pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type):
            floats.append(f"{f.name}.list.element")
        elif pa.types.is_string(f.type):
            strings.append(f.name)
    return ParquetOptions(
        compression="zstd", use_dictionary=strings, use_byte_stream_split=floats
    )


def write_bounded(
    table: pa.Table, where: Any, *, list_column: str, max_values: int, **options: Any
) -> None:
    """`table` as Parquet whose row groups each hold at most `max_values` elements of
    `list_column` (at least one row a group): a reader that wants one row decodes one
    bounded group, never a whole step's samples."""
    lengths = pc.fill_null(pc.list_value_length(table[list_column]), 0).to_numpy(
        zero_copy_only=False
    )
    ends = lengths.cumsum()
    with pq.ParquetWriter(where, table.schema, **options) as writer:
        start = 0
        while start < table.num_rows:
            before = int(ends[start - 1]) if start else 0
            stop = max(int(ends.searchsorted(before + max_values, side="right")), start + 1)
            writer.write_table(table.slice(start, stop - start), row_group_size=stop - start)
            start = stop
        if table.num_rows == 0:
            writer.write_table(table)


def read_parquet(
    files: list[Path],
    schema: pa.Schema,
    *,
    columns: list[str] | None = None,
    dictionary: tuple[str, ...] = (),
    having: str | None = None,
) -> pa.Table:
    """Files of one table as `schema` (columns an older file lacks are null), projected to
    `columns`, the `dictionary` string columns kept dictionary-encoded. With `having`, only
    the row groups where that column has a value (the files' statistics say which): a
    superset of the rows where it is not null, for callers that drop the rest anyway.

    NOTE: file by file with pyarrow.parquet, not pyarrow.dataset: importing the dataset
    module imports pandas (~0.4 s), and the store-reading commands must start fast.
    """
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
        for f in schema
    ]
    target = pa.schema(fields)
    if columns is not None:
        target = pa.schema([target.field(c) for c in columns])
    tables = []
    for f in files:
        try:
            pf = _open(f, [c for c in dictionary if c in target.names])
            have = set(pf.schema_arrow.names)
            read = [c for c in target.names if c in have]
            if having is not None:
                groups = _row_groups_having(pf, having)
                if not groups:
                    continue
                t = pf.read_row_groups(groups, columns=read, use_threads=True)
            else:
                t = pf.read(columns=read, use_threads=True)
        except (OSError, pa.ArrowException) as err:  # NOTE: name the file; others stay readable
            raise CorruptFile(Path(f), err) from err
        for col in target:
            if col.name not in have:
                t = t.append_column(col, pa.nulls(len(t), col.type))
        tables.append(t.select(target.names).cast(target))
    if not tables:  # NOTE: not schema.empty_table(), which imports pandas
        return pa.Table.from_batches([], schema=target)
    return pa.concat_tables(tables)


def _open(path: Path, dictionary: list[str]) -> pq.ParquetFile:
    """The file, its `dictionary` columns read dictionary-encoded: those it has (a file by
    an older or another writer may lack some; pyarrow refuses a name it does not hold)."""
    try:
        return pq.ParquetFile(path, read_dictionary=dictionary)
    except KeyError:
        have = set(pq.read_schema(path).names)
        return pq.ParquetFile(path, read_dictionary=[c for c in dictionary if c in have])


def _row_groups_having(pf: pq.ParquetFile, column: str) -> list[int]:
    """Row groups of a file whose `column` is not all null (all of them without statistics)."""
    names = pf.schema_arrow.names
    if column not in names:
        return []  # an older file without the column: null throughout
    meta, j = pf.metadata, pf.schema.names.index(column)
    out = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        stats = rg.column(j).statistics
        if stats is None or not stats.has_null_count or stats.null_count < rg.num_rows:
            out.append(i)
    return out


def table_rows(table: pa.Table) -> list[StoredRow]:
    """Rows as dicts; timestamps converted here, since pyarrow imports pandas (~0.4 s) to
    convert a zoned timestamp column."""
    stamps = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
    micros = {c: pc.cast(table[c], pa.int64()).to_pylist() for c in stamps}
    rows = table.drop_columns(stamps).to_pylist()
    for c, values in micros.items():
        for row, us in zip(rows, values, strict=True):
            row[c] = None if us is None else _EPOCH + timedelta(microseconds=us)
    return rows


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
