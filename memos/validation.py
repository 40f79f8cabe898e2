"""Argument checks at the edge of the public facade.

Every public `MemoryOS` method checks its arguments here first, so bad input becomes the memos
error that names the fix (`InvalidFilterError` for a scope, id, tag, date or bound;
`InvalidRecordError` for a record or change) before anything is read or written; no pydantic,
arrow, LanceDB or Python built-in error escapes for a bad argument. The limits are the
documented ones: text fields up to `MAX_TEXT_CHARS`, a query up to `MAX_QUERY_CHARS`, `k` up to
`MAX_K`, a token budget up to `MAX_BUDGET_TOKENS`, dates from year 1 to 9999.
"""

from __future__ import annotations

import inspect
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, overload

from pydantic import ValidationError

from memos.store.scope import Scope, utc_time, validate_record_id, validate_value

from .exceptions import ConfigError, DuplicateIdError, InvalidFilterError, InvalidRecordError
from .memtypes import MemoryRecord

R = TypeVar("R", bound=MemoryRecord)

__all__ = [
    "HISTORY_REQUIRED",
    "IMMUTABLE_FIELDS",
    "LIFECYCLE_FIELDS",
    "MAX_BATCH",
    "MAX_BUDGET_TOKENS",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MAX_TEXT_CHARS",
    "check_bool",
    "check_budget",
    "check_changeable",
    "check_changes",
    "check_history_row",
    "check_int",
    "check_lifecycle_untouched",
    "check_not_superseded",
    "check_options",
    "check_query",
    "check_record",
    "check_records",
    "check_scope",
    "check_scopes",
    "check_secret_not_exposed",
    "check_state_entry",
    "check_status",
    "check_statuses",
    "check_tags",
    "check_text",
    "check_time",
    "check_validity",
    "check_within_period",
    "describe_errors",
    "folded",
    "shown_or_sealed",
]

IMMUTABLE_FIELDS = frozenset({"id", "user_id", "agent_id", "session_id", "text", "created_at", "updated_at"})
"""Fields an update never changes: identity, scope, the derived index text and the timestamps."""
LIFECYCLE_FIELDS = frozenset({"source_ids", "status", "superseded_by", "valid_to"})
"""Fields only the lifecycle operations set (supersede, merge_into, archive, decay, consolidation,
the graph's closings and merges; `RecordAccess.revise` is their path): a user's or a model's
`update` that set them could reactivate a superseded record beside its successor, point a record
at a successor that never replaced it, or forge its provenance."""
_LIFECYCLE_OPERATIONS = ("supersede (replace it by a new version: the old one closes its validity and links it), "
                        "merge_into (fold a duplicate into the record that says the same), archive (take it out of "
                        "retrieval) or delete (forget it)")

MAX_TEXT_CHARS = 1_000_000
"""The longest value of any text field of a record (the records' own pydantic limit)."""
MAX_QUERY_CHARS = 100_000
"""The longest search query (the same limit as one chat message)."""
MAX_K = 1_000
"""The most hits one search returns."""
MAX_BUDGET_TOKENS = 10_000_000
"""The largest token budget a search packs into."""
MAX_BATCH = 100_000
"""The most records one `add` call takes (split a larger import into batches)."""
_STATUSES = ("active", "superseded", "archived")


def check_scope(scope: object) -> Scope:
    """`scope` must be a `Scope` (user required)."""
    if not isinstance(scope, Scope):
        raise InvalidFilterError(f"scope must be a memos.Scope such as Scope('alice'), got {type(scope).__name__}")
    return scope


def check_options(call: Callable[..., Any], options: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """`options`, if each is a keyword-only parameter of `call`, which an entry point passes them on to
    (`MemoryOS.session`, `MemoryOS.agent`): an unknown one is a `ConfigError` listing the ones there are,
    not the call's raw TypeError."""
    accepted = [name for name, p in inspect.signature(call).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"{what}() has no option {', '.join(map(repr, unknown))}; its options are {', '.join(accepted)}")
    return options


def check_text(value: object, what: str, *, limit: int = MAX_TEXT_CHARS) -> str:
    """A string of valid Unicode (no lone surrogates) of at most `limit` characters."""
    if not isinstance(value, str):
        raise InvalidRecordError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidRecordError(f"{what} is {len(value):,} characters; the limit is {limit:,} (split it, or store it as a resource)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRecordError(f"{what} contains unpaired surrogates (not valid Unicode text)") from None
    return value


def check_query(query: object) -> str:
    """A search query: a string of valid Unicode up to `MAX_QUERY_CHARS`."""
    if not isinstance(query, str):
        raise InvalidFilterError(f"query must be a string, got {type(query).__name__}")
    try:
        return check_text(query, "query", limit=MAX_QUERY_CHARS)
    except InvalidRecordError as exc:
        raise InvalidFilterError(str(exc)) from None


@overload
def check_int(value: object, what: str, *, low: int, high: int, optional: Literal[False] = False) -> int: ...
@overload
def check_int(value: object, what: str, *, low: int, high: int, optional: bool) -> int | None: ...
def check_int(value: object, what: str, *, low: int, high: int, optional: bool = False) -> int | None:
    """An int (not a bool) in [low, high]; None too when `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidFilterError(f"{what} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidFilterError(f"{what} must be between {low:,} and {high:,}, got {value:,}")
    return value


def check_budget(value: object) -> int | None:
    """A token budget: None, or 1 to `MAX_BUDGET_TOKENS`."""
    return check_int(value, "budget_tokens", low=1, high=MAX_BUDGET_TOKENS, optional=True)


def check_bool(value: object, what: str) -> bool:
    """A real bool (not 0, 1 or "yes")."""
    if not isinstance(value, bool):
        raise InvalidFilterError(f"{what} must be True or False, got {type(value).__name__}")
    return value


def check_time(value: object, what: str) -> datetime | None:
    """None or a datetime from year 1 to 9999 (naive means UTC); returned in UTC."""
    return None if value is None else utc_time(value, what)


def check_tags(tags: object) -> list[str] | None:
    """None or a list of tag strings."""
    if tags is None:
        return None
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise InvalidFilterError(f"tags must be a list of strings, got {type(tags).__name__}")
    return [validate_value(t, "tag") for t in tags]


def check_status(status: object) -> str:
    """One status (`counts`, `stored_vectors`)."""
    if not isinstance(status, str) or status not in _STATUSES:
        raise InvalidFilterError(f"status must be one of {list(_STATUSES)}, got {status!r}")
    return status


def check_scopes(scopes: object) -> tuple[Scope, ...]:
    """A non-empty list of scopes (`list_in`)."""
    if isinstance(scopes, str | bytes) or not isinstance(scopes, Sequence) or not scopes:
        raise InvalidFilterError(f"scopes must be a non-empty list of memos.Scope, got {scopes!r}"[:200])
    return tuple(check_scope(s) for s in scopes)


def check_statuses(status: object) -> tuple[str, ...]:
    """A status, a list of them, or None (all)."""
    if status is None:
        return ()
    statuses = (status,) if isinstance(status, str) else status
    if not isinstance(statuses, Sequence) or any(s not in _STATUSES for s in statuses):
        raise InvalidFilterError(f"status must be one of {list(_STATUSES)} (or a list of them, or None), got {status!r}")
    return tuple(statuses)


def check_record(record: object) -> MemoryRecord:
    """A `MemoryRecord` whose text is valid and within limits and whose id is usable.

    The facade re-validates every field against the record's type before it writes (a record
    built with `model_construct` included), so this checks only what that leaves unclear."""
    if not isinstance(record, MemoryRecord):
        raise InvalidRecordError(f"expected a memory record (e.g. Fact(...)), got {type(record).__name__}")
    for name, value in record.__dict__.items():
        if type(value) is list:
            for item in value:
                if isinstance(item, str) and not _plain(item):
                    check_text(item, f"{record.memory_type}.{name}")
        elif isinstance(value, str) and not _plain(value):
            check_text(value, f"{record.memory_type}.{name}")
    _record_tags(record.tags)
    validate_record_id(record.id)
    return check_validity(record)


def check_validity(record: R) -> R:
    """An active record's validity must not end before it starts (`valid_to` before `valid_from`:
    a fact never true). A superseded one may: a fact valid from next month, superseded today.
    The record type refuses such a record when it validates (`MemoryRecord`); this is for one
    built with `model_construct`, refused here with the facade's error before anything is written."""
    start, end = record.valid_from, record.valid_to
    if record.status == "active" and start is not None and end is not None and _utc(end) < _utc(start):
        raise InvalidRecordError(f"{record.memory_type} record {record.id}: valid_to {end.isoformat()} is before valid_from "
                                 f"{start.isoformat()}; a validity ends after it starts")
    return record


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _plain(text: str) -> bool:
    """Fast path: short enough and ASCII (so no surrogate); anything else gets the full check."""
    return len(text) <= MAX_TEXT_CHARS and text.isascii()


def check_records(records: R | Iterable[R]) -> list[R]:
    """One record or an iterable of records, each checked; their ids must differ."""
    if isinstance(records, MemoryRecord):
        items = [records]
    elif isinstance(records, Iterable) and not isinstance(records, str | bytes | Mapping):
        items = list(records)
    else:
        raise InvalidRecordError(f"expected a record or a list of records, got {type(records).__name__}")
    if len(items) > MAX_BATCH:
        raise InvalidRecordError(f"{len(items):,} records in one add; the limit is {MAX_BATCH:,} (add them in batches)")
    seen: set[str] = set()
    for record in items:
        check_record(record)
        if record.id in seen:
            raise DuplicateIdError(record.id, "twice in this batch")
        seen.add(record.id)
    return items


def check_changes(changes: object) -> dict[str, Any]:
    """An update's changes: a dict of field name to value; text values are checked."""
    if not isinstance(changes, Mapping) or not all(isinstance(k, str) for k in changes):
        raise InvalidRecordError(f"changes must be a dict of field name to new value, got {type(changes).__name__}")
    for name, value in changes.items():
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, str):
                check_text(item, name)
    if isinstance(changes.get("tags"), list):
        _record_tags(changes["tags"])
    return dict(changes)


def check_changeable(record_type: type[MemoryRecord], changes: Mapping[str, Any], *, lifecycle: bool) -> None:
    """The fields an update may change: the type's own and the base's, never identity, scope, index
    text or timestamps (`IMMUTABLE_FIELDS`); the lifecycle fields only with `lifecycle` (the
    kernel's own operations, `RecordAccess.revise`)."""
    bad = set(changes) & IMMUTABLE_FIELDS
    unknown = set(changes) - set(record_type.model_fields)
    if bad or unknown:
        closed = IMMUTABLE_FIELDS if lifecycle else IMMUTABLE_FIELDS | LIFECYCLE_FIELDS
        raise InvalidRecordError(f"cannot update {sorted(bad | unknown)} of a {record_type.memory_type} record; "
                                 f"updatable fields: {sorted(set(record_type.model_fields) - closed)}")
    if not lifecycle:
        check_lifecycle_untouched(changes)


def check_lifecycle_untouched(changes: Mapping[str, Any]) -> None:
    """A user's or a model's update sets no lifecycle field (`LIFECYCLE_FIELDS`); the error names
    the operation that does."""
    fields = sorted(set(changes) & LIFECYCLE_FIELDS)
    if fields:
        raise InvalidRecordError(f"an update cannot change {fields}: a record's status, successor, provenance and end of "
                                 f"validity change only through its lifecycle: {_LIFECYCLE_OPERATIONS}")


def check_not_superseded(record: MemoryRecord) -> None:
    """A record added (`add`, or the new version `supersede` adds) is no one's old version: its
    status is not "superseded" and it names no successor. Only `supersede` and `merge_into` make
    such a record; added as one it would point at a successor that never replaced it (an import
    carries its records' lifecycle as exported, through its own path)."""
    if record.status == "superseded" or record.superseded_by:
        raise InvalidRecordError(f"{record.memory_type} record {record.id} is added as superseded"
                                 f"{f' by {record.superseded_by}' if record.superseded_by else ''}; a new record is "
                                 f"active (or archived): a record becomes superseded only through {_LIFECYCLE_OPERATIONS}")


def check_within_period(record: MemoryRecord, changes: Mapping[str, Any]) -> None:
    """A user's update leaves a superseded record's `valid_from` as it was: its period, closed when
    its successor replaced it, is what a question about the past is answered from."""
    if "valid_from" in changes and record.status == "superseded":
        raise InvalidRecordError(f"{record.memory_type} record {record.id} is superseded by {record.superseded_by}; "
                                 "the period of a superseded record is history: change valid_from of its successor instead")


def _record_tags(tags: list[Any]) -> None:
    """A record's tags must be tags a filter can select (`check_tags`): no control character, at
    most `MAX_ID_LENGTH` characters each."""
    try:
        check_tags([t for t in tags if isinstance(t, str)])
    except InvalidFilterError as exc:
        raise InvalidRecordError(f"{exc}; a tag is what a filter selects records by") from None


def shown_or_sealed(record_type: type[MemoryRecord], changes: Mapping[str, Any]) -> bool:
    """Whether an update changes a field shown in clear or a secret field (the caption check runs
    then: an item stored before it was folded, 'wifi Hunter2' / 'hunter2', can still have its
    importance or status changed)."""
    return bool(set(changes) & {*record_type.content_fields(), "tags", *record_type.secret_fields})


def check_state_entry(key: object, value: object) -> None:
    """A state entry (`set_state`): a non-empty string key and a string value."""
    if not isinstance(key, str) or not key or not isinstance(value, str):
        raise InvalidRecordError(f"a state entry is a non-empty string key and a string value, got {type(key).__name__} "
                                 f"and {type(value).__name__}")


def check_secret_not_exposed(record: MemoryRecord, clear: Mapping[str, str]) -> None:
    """Refuse a record whose clear secret occurs in a field that is embedded, indexed or shown.

    `clear` maps each secret field to its clear value. Only the caption (and the type's other
    fields) are ever shown, so a secret inside them would leak through the very part meant to
    describe it."""
    shown = [name for name in (*type(record).content_fields(), "tags") if name not in record.secret_fields]
    for field, secret in clear.items():
        secret = folded(secret or "")
        if not secret:
            continue
        for name in shown:
            value = getattr(record, name)
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and secret in folded(v) for v in values):
                raise InvalidRecordError(
                    f"a {record.memory_type} item's {name} must not contain its {field}: the {name} is embedded, "
                    f"indexed and shown in clear; describe the item instead (e.g. 'bank card PIN')")


def folded(text: str) -> str:
    """`text` as a secret is compared in: case, width (NFKC: full-width digits) and spaces and
    dashes ignored, so 'PIN 4921-77' in a caption still holds the secret '492177' and 'Hunter2'
    holds 'hunter2'."""
    return _SEPARATORS.sub("", unicodedata.normalize("NFKC", text)).casefold()


_SEPARATORS = re.compile(r"[\s\-_.]+")

HISTORY_REQUIRED = ("id", "record_id", "memory_type", "user_id", "op", "at")
"""The fields every history row has: the audit pass and `history` read them."""
_HISTORY_TEXT = ("actor", "agent_id", "session_id")
_HISTORY_OPTIONAL = ("before", "after", "note")


def check_history_row(row: object) -> dict[str, Any]:
    """An audit row from outside (an import): a JSON object with the history table's fields, the
    required ones set; returned ready to store (`at` in UTC, unset text fields empty).

    The audit pass and `history` read every stored row, so a row they could not read (no user,
    op or time) is refused here rather than stored."""
    if not isinstance(row, Mapping):
        raise InvalidRecordError(f"a history row must be a JSON object, got {type(row).__name__}")
    unknown = sorted(str(k) for k in set(row) - {*HISTORY_REQUIRED, *_HISTORY_TEXT, *_HISTORY_OPTIONAL})
    if unknown:
        raise InvalidRecordError(f"a history row has unknown fields {unknown}")
    missing = [name for name in HISTORY_REQUIRED if row.get(name) in (None, "")]
    if missing:
        raise InvalidRecordError(f"a history row needs {', '.join(HISTORY_REQUIRED)}; this one has no {', '.join(missing)}")
    out: dict[str, Any] = {"id": validate_record_id(row["id"]), "record_id": validate_record_id(row["record_id"]),
                           "user_id": validate_value(row["user_id"], "user_id")}
    for name in ("memory_type", "op"):
        out[name] = check_text(row[name], f"history {name}", limit=100)
    for name in _HISTORY_TEXT:
        out[name] = validate_value(row.get(name) or "", f"history {name}", allow_empty=True)
    for name in _HISTORY_OPTIONAL:
        value = row.get(name)
        out[name] = None if value is None else check_text(value, f"history {name}")
    for name in ("before", "after"):
        try:
            if out[name] is not None and not isinstance(json.loads(out[name]), dict | None):
                raise ValueError
        except ValueError:
            raise InvalidRecordError(f"history {name} must be a record as JSON text (or null)") from None
    at = row["at"]
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at)
        except ValueError:
            raise InvalidRecordError(f"history at {at[:40]!r} is not an ISO date and time") from None
    try:
        out["at"] = check_time(at, "history at")
    except InvalidFilterError as exc:
        raise InvalidRecordError(str(exc)) from None
    return out


def describe_errors(exc: ValidationError) -> str:
    """The first few of pydantic's errors, one line each (field: message)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()[:5])
