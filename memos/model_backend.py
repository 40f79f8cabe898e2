"""What the kernel asks of a language model, as protocols, and where the implementation is registered.

The kernel never imports `memos.agents` (agents sit a floor above it; see the README's
"Floors"). Where it needs a model -- a reflection, a judgement on two facts that may conflict,
a chat agent for `MemoryOS.agent(...)` -- it asks the registered `ModelBackend`. The
pydantic-ai implementation (`memos.agents.backend`) is registered by the package root
(`memos/__init__.py`), lazily, so `import memos` does not load pydantic-ai; a test or an
application may register another one.

The summarizer of paging is the same idea on a smaller scale: `memos.context.paging.Summarizer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .exceptions import ConfigError

if TYPE_CHECKING:  # annotations only: `import memos` (and `memos --help`) stays free of pydantic
    from .memtypes import MemoryRecord

    from memos.store.scope import Scope

__all__ = ["ConflictDecision", "Insight", "ModelBackend", "model_backend", "opener", "provide", "register_backend"]


class Insight(Protocol):
    """One thing a reflection learned from several episodes (what the kernel stores of it)."""

    kind: str
    """"fact" or "procedure"."""
    subject: str
    summary: str
    steps: list[str]
    importance: float
    source_ids: list[str]


class ConflictDecision(Protocol):
    """A model's verdict on an (older, newer) pair of facts about one subject."""

    old_id: str
    new_id: str
    action: str
    """"add", "update" (merge the older into the newer), "supersede" or "nothing"."""
    reason: str


class ModelBackend(Protocol):
    """The model-backed work the kernel delegates; `model` is whatever the caller was given."""

    async def reflect(self, model: Any, episodes: Sequence[MemoryRecord], *, now: datetime) -> Sequence[Insight]:
        """Cited insights from `episodes` (each insight's `source_ids` are ids of the episodes shown)."""
        ...

    async def decide_conflicts(self, model: Any, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *,
                               now: datetime) -> Sequence[ConflictDecision]:
        """One decision per (older, newer) pair of facts."""
        ...

    def chat_agent(self, memory: Any, scope: Scope, model: Any, **options: Any) -> Any:
        """A chat agent over `scope` of `memory` (a `memos.memory.MemoryOS`, which sits above this
        module: named, not imported) -- what `MemoryOS.agent` returns."""
        ...


_loader: Callable[[], ModelBackend] | None = None
_backend: ModelBackend | None = None


def register_backend(backend: ModelBackend | Callable[[], ModelBackend]) -> None:
    """Make `backend` (or a function returning it, called on first use) the one the kernel asks."""
    global _loader, _backend
    if callable(backend) and not hasattr(backend, "reflect"):
        _loader, _backend = backend, None
    else:
        _loader, _backend = None, backend  # type: ignore[assignment]


def model_backend() -> ModelBackend:
    """The registered backend; a clear error when none is."""
    global _backend
    if _backend is None and _loader is not None:
        _backend = _loader()
    if _backend is None:
        raise ConfigError("no model backend is registered: install memos-memory with its agents "
                          "(memos.agents) or call memos.model_backend.register_backend(...)")
    return _backend


_OPENERS: dict[str, Callable[..., Any]] = {}


def provide(entry: str, opener: Callable[..., Any]) -> None:
    """Register what `MemoryOS.session`, `MemoryOS.scheduler` or `MemoryOS.agent` opens.

    The modules that provide them (`memos.context.session`, `memos.jobs.runs`, `memos.agents`) use the facade,
    so the facade cannot import them without a circle; the package root registers them
    (`memos/__init__.py`), and an application may register its own. This registry lives here,
    not in the facade's module, so that registering costs no LanceDB import (`memos --help`)."""
    if entry not in ("session", "scheduler", "agent"):
        raise ConfigError(f"MemoryOS has no entry point {entry!r}; known: session, scheduler, agent")
    _OPENERS[entry] = opener


def opener(entry: str) -> Callable[..., Any]:
    """What `provide` registered for `entry`."""
    if entry not in _OPENERS:
        raise ConfigError(f"nothing provides MemoryOS.{entry}(); `import memos` registers the defaults")
    return _OPENERS[entry]
