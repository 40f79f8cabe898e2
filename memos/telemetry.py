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

__all__ = ["instrumentation", "span"]

_tracer = trace.get_tracer("memos")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named `name` with scalar attributes (never a record's content or a secret)."""
    with _tracer.start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None}) as current:
        yield current


def instrumentation(instrument: Any) -> Any:
    """What an agent is instrumented with for `instrument=`: True records runs, model requests and
    tools without their content (prompts, replies, tool arguments), since a secret the user says
    reaches the model, and then the vault_store tool, before the vault can take it out of the
    turn; an `InstrumentationSettings` given in full is used as it is (the caller's choice)."""
    if instrument is True:
        from pydantic_ai.models.instrumented import InstrumentationSettings

        return InstrumentationSettings(include_content=False)
    return instrument
