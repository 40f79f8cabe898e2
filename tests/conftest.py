"""Shared fixtures: a real LanceDB in a temp dir, the real local embedder (loaded once)."""

from __future__ import annotations

import os

os.environ.setdefault("LANCE_LOG", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# CLI output is compared as text: a wide console, so a long temp path never wraps a message.
os.environ["COLUMNS"] = "500"
# the local encoder in the test process itself, as on a one-core machine: tests/test_encoder_pool.py
# starts pools of its own (vectors are the same either way; fewer processes on a shared machine)
os.environ.setdefault("MEMOS_ENCODER_WORKERS", "1")

from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import pydantic_ai.models  # noqa: E402
import pytest  # noqa: E402

from memos import MemoryOS, Scope  # noqa: E402
from memos.embeddings import local_embedder  # noqa: E402

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

from hypothesis import settings as _hypothesis_settings  # noqa: E402

# Property tests explore the same examples on every run, so CI cannot flake on a lucky draw;
# set HYPOTHESIS_PROFILE=explore locally to search with fresh random examples.
_hypothesis_settings.register_profile("ci", derandomize=True)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Workers for `-n auto` (pyproject's addopts): the whole suite waits much of its time on
    process starts, sleeps and servers, so it runs in at least 2 processes even on one or two
    cores, and in at most 4 (each loads LanceDB and the embedder). Test files named on the command
    line run in this process, as without xdist (two workers' imports and collection cost more than
    a few files gain); PYTEST_XDIST_AUTO_NUM_WORKERS decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if config.args and all(Path(str(arg).split("::", 1)[0]).is_file() for arg in config.args):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(4, cores))


class Clock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture(scope="session")
def embedder():
    """The real offline MiniLM embedder, shared by the whole session."""
    return local_embedder()


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for every web-view test module (tests/_browser.py; each module skips without one)."""
    from _browser import start_chromium

    with start_chromium() as driver:
        yield driver


@pytest.fixture
def browser(chromium):
    """The shared Chromium for one test (1280x1000), left after it as a fresh tab would be: blank, no storage."""
    from _browser import clean_tab

    chromium.set_window_size(1280, 1000)
    yield chromium
    clean_tab(chromium)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def vault_key(tmp_path: Path) -> Path:
    return tmp_path / "keys" / "vault.key"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "db"


@pytest.fixture
async def mem(db_path: Path, embedder, clock: Clock, vault_key: Path) -> MemoryOS:
    """A fresh MemoryOS on a real LanceDB directory with the real embedder."""
    return await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)


@pytest.fixture
def alice() -> Scope:
    return Scope("alice", "assistant", "s1")


@pytest.fixture
def bob() -> Scope:
    return Scope("bob", "assistant", "s1")


async def store_hashes(mem: MemoryOS) -> dict[str, str]:
    """Row count and a hash of every row of every table, history and meta included: bad input
    must leave all of it as it was (tests/test_bad_input.py, tests/test_import_checks.py)."""
    import hashlib
    import json

    await mem.storage.flush_queued()  # journaled rows are stored data: in their tables first
    tables = {name: t.table for name, t in mem.storage.tables.items()}
    tables["history"] = mem.storage.history
    out = {}
    for name, table in tables.items():
        rows = (await table.query().to_arrow()).to_pylist()
        blob = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
        out[name] = f"{len(rows)}:{hashlib.sha256(''.join(blob).encode()).hexdigest()}"
    out["meta"] = json.dumps(await mem.storage.get_meta(), sort_keys=True, default=str)
    return out


async def table_snapshot(memory: MemoryOS) -> dict[str, list]:
    """Every row of every table (vectors left out) and the history: to prove nothing changed."""
    out: dict[str, list] = {}
    for name in memory.type_names:
        rows = await memory.storage.rows(name, None)
        out[name] = sorted(({k: v for k, v in r.items() if k != "vector"} for r in rows), key=lambda r: r["id"])
    out["_history"] = sorted((e.id for e in await memory.storage.history_rows(None)))
    return out


@pytest.fixture
def snapshot():
    """`await snapshot(mem)`: the whole store's content, for before/after comparisons."""
    return table_snapshot


@pytest.fixture
def dialogue():
    """`await dialogue(mem, scope, [(speaker, text), ...])`: one session's turns stored as
    D1:1, D1:2, ... 30 s apart (the ids LOCOMO gives its turns)."""
    start = datetime(2024, 7, 3, 18, 0, tzinfo=UTC)

    async def ingest(mem: MemoryOS, scope: Scope, turns: list[tuple[str, str]]) -> None:
        await mem.ingest(scope, [{"speaker": who, "text": text, "id": f"D1:{i + 1}", "timestamp": start + timedelta(seconds=30 * i)}
                                 for i, (who, text) in enumerate(turns)])
    return ingest
