"""From a memory type's pydantic fields to a LanceDB (Arrow) schema, and rows back to records.

Scalars map to their Arrow types, datetimes to UTC microsecond timestamps, `list[str]` to a
list of strings, `Literal`s and enums to strings; anything richer (dicts, nested models) is
stored as a JSON string. Every table also has a nullable fixed-size `vector` column.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel

from memos.exceptions import InvalidRecordError
from memos.memtypes import MemoryRecord

__all__ = ["VECTOR_COLUMN", "arrow_rows", "arrow_schema", "arrow_table", "finite", "json_columns", "record_from_row", "row_from_record"]

VECTOR_COLUMN = "vector"
_TS = pa.timestamp("us", tz="UTC")


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        return Any, True
    return annotation, False


def _arrow_type(annotation: Any) -> pa.DataType:
    annotation, _ = _unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if annotation is str or origin is Literal or (isinstance(annotation, type) and issubclass(annotation, Enum)):
        return pa.string()
    if annotation is bool:
        return pa.bool_()
    if annotation is int:
        return pa.int64()
    if annotation is float:
        return pa.float64()
    if annotation is datetime:
        return _TS
    if origin in (list, tuple, set) and typing.get_args(annotation)[:1] == (str,):
        return pa.list_(pa.string())
    return pa.string()  # stored as JSON


def json_columns(record_type: type[MemoryRecord]) -> frozenset[str]:
    """The fields stored as JSON strings."""
    out = set()
    for name, info in record_type.model_fields.items():
        annotation, _ = _unwrap_optional(info.annotation)
        if _arrow_type(annotation) == pa.string() and annotation is not str and typing.get_origin(annotation) is not Literal \
                and not (isinstance(annotation, type) and issubclass(annotation, Enum)):
            out.add(name)
    return frozenset(out)


@functools.lru_cache(maxsize=256)
def arrow_schema(record_type: type[MemoryRecord], dim: int) -> pa.Schema:
    """The LanceDB schema of a memory type's table, with a `dim`-wide vector column."""
    fields = [pa.field(name, _arrow_type(info.annotation), nullable=True) for name, info in record_type.model_fields.items()]
    fields.append(pa.field(VECTOR_COLUMN, pa.list_(pa.float32(), dim), nullable=True))
    return pa.schema(fields)


def arrow_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table | list[dict[str, Any]]:
    """Rows to write, as an Arrow table of the table's own types: LanceDB would otherwise infer
    the types row by row in Python (vectors as lists of doubles) and cast them again on write.
    Rows whose values need a cast (a number for a text column) are returned as they are, for
    LanceDB's own conversion, which casts."""
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return rows


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def finite(vector: Sequence[float]) -> bool:
    """Whether every value of `vector` is a finite number. LanceDB refuses a write holding a NaN
    vector, and a row that cannot be written blocks every write queued behind it, so such a
    vector must be refused before the write is acknowledged. (The sum is NaN or infinite when any
    value is, and also for values near 1e308, which no embedder makes; 384 values take ~2 us
    this way, ~9 us checked one by one.)"""
    return math.isfinite(sum(vector))


def row_from_record(record: MemoryRecord, vector: list[float] | None, json_cols: frozenset[str]) -> dict[str, Any]:
    """A LanceDB row for `record` (its `text` must already be set). A vector with a NaN or
    infinite value is refused (`InvalidRecordError`)."""
    if vector is not None and not finite(vector):
        raise InvalidRecordError(f"the vector of {record.memory_type} record {record.id} holds a NaN or infinite value; nothing was stored")
    row: dict[str, Any] = {}
    for name in type(record).model_fields:
        value = getattr(record, name)
        if name in json_cols:
            value = json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, default=str)
        elif isinstance(value, datetime):
            value = _utc(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, (tuple, set)):
            value = list(value)
        row[name] = value
    row[VECTOR_COLUMN] = vector
    return row


def record_from_row(record_type: type[MemoryRecord], row: dict[str, Any], json_cols: frozenset[str]) -> MemoryRecord:
    """Rebuild a record from a LanceDB row (extra columns such as `_distance` are ignored).

    Stored rows were validated on write; re-validating every search candidate would cost more
    than the search, so the record is built as stored (`model_construct`), with field defaults
    for columns a row lacks (or holds NULL in, for a non-optional field added later)."""
    data = {}
    plan = _read_plan(record_type, json_cols)
    for name, is_json, keep_null, default in plan:
        value = row.get(name, _ABSENT)
        if value is _ABSENT or (value is None and not keep_null):
            if default is not _REQUIRED:
                data[name] = default()
            continue
        data[name] = json.loads(value) if is_json and isinstance(value, str) else value
    if len(data) == len(plan) and _plain(record_type):
        # every field is present: what model_construct would do, without its per-field alias
        # lookups (a search builds hundreds of records; this is 5x faster)
        record = record_type.__new__(record_type)
        object.__setattr__(record, "__dict__", data)
        object.__setattr__(record, "__pydantic_fields_set__", set(data))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record
    return record_type.model_construct(**data)


@functools.lru_cache(maxsize=256)
def _plain(record_type: type[MemoryRecord]) -> bool:
    """A type whose records can be built by setting their fields (no aliases, private
    attributes, post-init hook or extra fields)."""
    return (not record_type.__pydantic_post_init__ and not record_type.__private_attributes__
            and record_type.model_config.get("extra") != "allow"
            and all(f.alias is None and f.validation_alias is None for f in record_type.model_fields.values()))


_ABSENT = object()
_REQUIRED = object()


@functools.lru_cache(maxsize=256)
def _read_plan(record_type: type[MemoryRecord], json_cols: frozenset[str]) -> tuple[tuple[str, bool, bool, Any], ...]:
    """Per field: its name, whether it is stored as JSON, whether NULL is a value of it, and a
    default factory (or `_REQUIRED`)."""
    plan = []
    for name, info in record_type.model_fields.items():
        optional = _unwrap_optional(info.annotation)[1]
        default: Any = _REQUIRED if info.is_required() else functools.partial(info.get_default, call_default_factory=True)
        plan.append((name, name in json_cols, optional or info.is_required(), default))
    return tuple(plan)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as dicts (what LanceDB's `to_list` gives, 3-4x faster).

    pyarrow builds each time-zoned timestamp through the time-zone database, which made three
    timestamp columns most of a search's row conversion; here they are read as microseconds
    and offset from the epoch in UTC."""
    names = table.column_names
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type) and column.type.unit == "us" and column.type.tz in ("UTC", "+00:00"):
            micros = [us for chunk in column.chunks for us in chunk.view(pa.int64()).to_pylist()]  # a view: no cast kernel
            columns.append([None if us is None else _EPOCH + timedelta(microseconds=us) for us in micros])
        else:
            columns.append(column.to_pylist())
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
