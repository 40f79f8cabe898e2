"""Scopes, and the only way a LanceDB `where` clause is built.

A scope is a hard partition between users: `user_id` is always required and always filtered,
so one user's query can never see another user's records. `agent_id` and `session_id` narrow
it further when given. A write stores all three (an unset id is stored as the empty string).

What a read sees (`Scope.where`, `Scope.contains`): the records of the user whose session id
equals the scope's (when set) and, when the scope names an agent, that agent's own records
*and the user's shared records* (stored without an agent: `memos ingest` without `--agent`,
a user-wide key's writes). `agent_id=""` names the shared records alone; `agent_id=None` spans
all of the user's agents. `Scope.exact_where` matches the ids exactly: what a bulk erase of
a scope acts on, so erasing an agent never erases what the user's other agents share.

Filters never interpolate raw strings. Every value passes `validate_value` (type, length,
no NUL or control characters, valid UTF-8) and is then quoted by `sql_string`, which
doubles single quotes. Column names are never taken from input.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from memos.exceptions import InvalidFilterError

__all__ = ["MAX_ID_LENGTH", "RowTest", "Scope", "Stamp", "Where", "sql_in", "sql_string", "utc_time", "valid_at",
           "validate_record_id", "validate_value"]

MAX_ID_LENGTH = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_RECORD_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


def validate_value(value: object, what: str, *, allow_empty: bool = False) -> str:
    """Return `value` as a safe filter string or raise `InvalidFilterError` saying why."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidFilterError(f"{what} is not valid UTF-8") from None
    if not isinstance(value, str):
        raise InvalidFilterError(f"{what} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidFilterError(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidFilterError(f"{what} is {len(value)} characters; the limit is {MAX_ID_LENGTH}")
    if _CONTROL.search(value):
        raise InvalidFilterError(f"{what} contains a control or NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidFilterError(f"{what} contains unpaired surrogates (not valid UTF-8)") from None
    return value


def validate_record_id(value: object) -> str:
    """A record id: 1-128 characters of letters, digits and `_ . : -`."""
    text = validate_value(value, "record id")
    if not _RECORD_ID.match(text):
        raise InvalidFilterError(f"record id {text[:40]!r} is not a valid id (letters, digits, _ . : - only)")
    return text


def sql_string(value: str) -> str:
    """Quote an already validated string as a SQL literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Iterable[str]) -> str:
    """`column IN (...)` over quoted, already validated strings; `false` for none."""
    quoted = ", ".join(sql_string(v) for v in values)
    return f"{column} IN ({quoted})" if quoted else "false"


class Stamp(TypedDict):
    """The ids a record carries of the scope it was written in (`Scope.stamp`)."""

    user_id: str
    agent_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a memory belongs to: a user, optionally one of their agents and one session.

    `user_id` is required. A scope with `agent_id=None` spans all of the user's agents; one
    naming an agent sees that agent's records and the user's shared (agent-less) ones; with
    `session_id=None` it spans all sessions. Writes store unset ids as "".
    """

    user_id: str
    agent_id: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        validate_value(self.user_id, "user_id")
        if self.agent_id is not None:
            validate_value(self.agent_id, "agent_id", allow_empty=True)
        if self.session_id is not None:
            validate_value(self.session_id, "session_id", allow_empty=True)

    def where(self) -> str:
        """What this scope sees, as a safe LanceDB filter: an agent's own records and the
        user's shared (agent-less) ones (see the module docstring)."""
        parts = [f"user_id = {sql_string(self.user_id)}"]
        if self.agent_id:
            parts.append(sql_in("agent_id", [self.agent_id, ""]))
        elif self.agent_id is not None:
            parts.append("agent_id = ''")
        if self.session_id is not None:
            parts.append(f"session_id = {sql_string(self.session_id)}")
        return " AND ".join(parts)

    def exact_where(self) -> str:
        """The records stored with exactly the ids this scope sets (an agent's own, without the
        shared ones): for what must not reach past them, such as erasing a scope."""
        parts = [f"user_id = {sql_string(self.user_id)}"]
        if self.agent_id is not None:
            parts.append(f"agent_id = {sql_string(self.agent_id)}")
        if self.session_id is not None:
            parts.append(f"session_id = {sql_string(self.session_id)}")
        return " AND ".join(parts)

    def stamp(self) -> Stamp:
        """The three ids a record written in this scope carries."""
        return {"user_id": self.user_id, "agent_id": self.agent_id or "", "session_id": self.session_id or ""}

    def contains(self, user_id: str, agent_id: str, session_id: str) -> bool:
        """True if a record with these ids is visible from this scope (as `where`)."""
        return (
            user_id == self.user_id
            and (self.agent_id is None or agent_id in (self.agent_id, ""))
            and (self.session_id is None or session_id == self.session_id)
        )

    def narrow(self, *, agent_id: str | None = None, session_id: str | None = None) -> Scope:
        """A narrower scope of the same user."""
        return Scope(self.user_id, agent_id if agent_id is not None else self.agent_id,
                     session_id if session_id is not None else self.session_id)

    def __str__(self) -> str:
        return "/".join(x for x in (self.user_id, self.agent_id, self.session_id) if x)


def utc_time(value: object, what: str) -> datetime:
    """`value` in UTC (a naive one is UTC), or a clear error for what is no datetime or leaves the years 1-9999."""
    if not isinstance(value, datetime):
        raise InvalidFilterError(f"{what} must be a datetime, got {type(value).__name__}")
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidFilterError(f"{what} {value!r} is outside the years 1 to 9999 once taken to UTC") from None


def _in_scope(scope: Scope, row: Mapping[str, Any]) -> bool:
    user, agent, session = row.get("user_id"), row.get("agent_id"), row.get("session_id")
    return isinstance(user, str) and isinstance(agent, str) and isinstance(session, str) and scope.contains(user, agent, session)


class _Null:
    """A missing value in a comparison: false either way, as SQL's NULL."""

    def __ge__(self, other: object) -> bool:
        return False

    __le__ = __lt__ = __gt__ = __ge__


def _row_time(row: Mapping[str, Any], column: str) -> Any:
    value = row.get(column)
    if not isinstance(value, datetime):
        return _Null()
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _sql_time(value: datetime) -> str:
    """A UTC datetime (`utc_time`) as a SQL timestamp literal."""
    # strftime's %Y does not pad years before 1000, which the SQL parser then rejects
    return (f"TIMESTAMP '{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}'")


def _timestamp(value: datetime, what: str) -> str:
    return _sql_time(utc_time(value, what))


def valid_at(when: datetime) -> str:
    """Rows still valid at `when` (not closed by then): the bi-temporal half of an `until` filter."""
    return f"valid_to IS NULL OR valid_to > {_timestamp(when, 'until')}"


RowTest = Callable[[Mapping[str, Any]], bool]
"""A `Where` as a test of one row (a dict of column values, as written)."""


class Where:
    """Builds a conjunction of safe conditions, starting from a scope; `test` gives the same
    conditions as a test of a row in Python (for rows held in memory, never for stored ones)."""

    def __init__(self, scope: Scope | None = None) -> None:
        self._parts: list[str] = [scope.where()] if scope is not None else []
        self._tests: list[RowTest] | None = [] if scope is None else [functools.partial(_in_scope, scope)]

    def _add(self, condition: str, test: RowTest | None) -> Where:
        self._parts.append(condition)
        if test is None:
            self._tests = None
        elif self._tests is not None:
            self._tests.append(test)
        return self

    def eq(self, column: str, value: object) -> Where:
        text = validate_value(value, column, allow_empty=True)
        return self._add(f"{column} = {sql_string(text)}", lambda row: row.get(column) == text)

    def id_in(self, ids: list[str]) -> Where:
        return self.any_of("id", [validate_record_id(i) for i in ids])

    def any_of(self, column: str, values: Iterable[str]) -> Where:
        """`column` is one of `values` (validated strings; none: no row)."""
        listed = list(values)
        chosen = frozenset(listed)
        return self._add(sql_in(column, listed), lambda row: row.get(column) in chosen)

    def status_in(self, statuses: tuple[str, ...] | list[str] | None) -> Where:
        if statuses:
            self.any_of("status", [validate_value(s, "status") for s in statuses])
        return self

    def tags_any(self, tags: list[str] | None) -> Where:
        if tags:
            listed = [validate_value(t, "tag") for t in tags]
            chosen = frozenset(listed)
            quoted = ", ".join(sql_string(t) for t in listed)
            self._add(f"array_has_any(tags, [{quoted}])", lambda row: any(t in chosen for t in row.get("tags") or ()))
        return self

    def time_range(self, column: str, since: datetime | None, until: datetime | None) -> Where:
        if since is not None:
            low = utc_time(since, "since")
            self._add(f"{column} >= {_sql_time(low)}", lambda row: _row_time(row, column) >= low)
        if until is not None:
            high = utc_time(until, "until")
            self._add(f"{column} < {_sql_time(high)}", lambda row: _row_time(row, column) < high)
        return self

    def any_time_window(self, column: str, windows: list[tuple[datetime, datetime]]) -> Where:
        """Rows whose `column` falls in any of the [start, end] windows."""
        if windows:
            spans = [(utc_time(a, "window start"), utc_time(b, "window end")) for a, b in windows]
            self._add(" OR ".join(
                f"({column} >= {_sql_time(a)} AND {column} <= {_sql_time(b)})" for a, b in spans),
                lambda row: any(a <= _row_time(row, column) <= b for a, b in spans))
        return self

    def raw(self, condition: str, test: RowTest | None = None) -> Where:
        """A condition written by memos itself (never from input); without `test` (the same
        condition as a test of a row), `Where.test` has none to give."""
        return self._add(condition, test)

    def test(self) -> RowTest | None:
        """The conditions as one test of a row (a dict of column values), or None where one of
        them was given as SQL alone (`raw`). A row with no value in a tested column fails it,
        as SQL's NULL does."""
        tests = self._tests
        if tests is None:
            return None
        return lambda row: all(t(row) for t in tests)

    def build(self) -> str | None:
        return " AND ".join(f"({p})" for p in self._parts) if self._parts else None

    def condition(self) -> str:
        """`build` for a call that must never match every row (a delete, a history rewrite, a
        search of the shared table): at least one condition, else an error."""
        where = self.build()
        if where is None:
            raise InvalidFilterError("a filter with no condition would match every row")
        return where
