"""OpenTelemetry spans for memory operations and background jobs.

memos emits spans through the OpenTelemetry API (a pydantic-ai dependency): `memos.search`,
`memos.add`, `memos.compile` and `memos.job`. They cost nothing until an application sets a
tracer provider. The agents pass pydantic-ai's own instrumentation through
(`ChatAgent(..., instrument=InstrumentationSettings(...))` or `Agent.instrument_all()`), so agent
runs, model requests and memory tool calls appear in the same trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

__all__ = ["span"]

_tracer = trace.get_tracer("memos")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named `name` with scalar attributes (never a record's content or a secret)."""
    with _tracer.start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None}) as current:
        yield current
