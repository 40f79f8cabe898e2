"""Opening a LanceDB store: the connection, its tables (created or brought up to date), the
embedder's dimension checked against what the store holds, the shared search table, and the
journal of a stopped process replayed."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import lancedb
import pyarrow as pa

from memos.embeddings import TextEmbedder
from memos.exceptions import EmbeddingDimensionError, StoreUnavailableError
from memos.memtypes import MemoryRecord
from memos.store.fulltext import FORM, MARK, has_cjk, index_form
from memos.store.history import HISTORY_SCHEMA
from memos.store.schema import VECTOR_COLUMN, arrow_schema, json_columns

from .errors import brief, storage_error
from .lease import StoreLease, local_path
from .openers import Openers
from .replay import replay_journal
from .search_index import SearchIndex
from .storage import DEFAULT_DIM, HISTORY_TABLE, META, META_SCHEMA, READ_CONSISTENCY, Storage, TypeTable, read_meta, write_meta
from .text_index import text_index
from .write_behind import WriteBehind

__all__ = ["CACHE_BYTES", "open_storage"]

log = logging.getLogger("memos.store.lancedb.opening")

CACHE_BYTES = {"index": 1024 * 2**20, "metadata": 64 * 2**20}
"""LanceDB's index and metadata caches, shared by every store a process opens: bounded memory,
large enough that a 1M-record store keeps the postings its searches need."""
async def open_storage(
    uri: str,
    record_types: Sequence[type[MemoryRecord]],
    embedder: TextEmbedder | None,
    storage_options: dict[str, str] | None = None,
) -> Storage:
    """Open (or create) the database at `uri` with a table for each record type. A relative
    directory is taken from the working directory now: work that ends later (rows written
    behind a turn, a background optimize, the purge lease's files) stays in that directory
    after the process changes its own."""
    local = local_path(uri)
    if local is not None and not uri.startswith("file://") and not local.is_absolute():
        uri = str(local.absolute())
        local = local.absolute()
    openers = Openers(local)  # refused while a re-embedding has the store (memos.store.lancedb.openers)
    if local is not None:  # another open of it in this process: its queued rows first (memos.store.lancedb.write_behind)
        await WriteBehind.flush_open(local)
    try:
        conn = await lancedb.connect_async(uri, storage_options=storage_options, read_consistency_interval=READ_CONSISTENCY,
                                           session=_session())
        meta = await conn.create_table(META, schema=META_SCHEMA, exist_ok=True)
        history = await conn.create_table(HISTORY_TABLE, schema=HISTORY_SCHEMA, exist_ok=True)
    except (OSError, RuntimeError, ValueError) as exc:
        error = storage_error(exc, uri)
        if error is exc:
            detail = brief(exc)[:300]
            error = StoreUnavailableError(f"cannot open the memos store at {uri}: {detail}")
        raise error from exc
    values = await read_meta(meta)
    stored = json.loads(values["embedder"]) if "embedder" in values else None
    dim, name = _settle_embedder(uri, stored, embedder)
    if stored != {"name": name, "dim": dim}:
        async with StoreLease.for_uri(uri).shared():
            await write_meta(meta, [{"key": "embedder", "value": json.dumps({"name": name, "dim": dim})}])
    storage = Storage(uri, conn, meta, history, dim, name, openers)
    physical = json.loads(values.get("tables", "{}"))
    present = set(await conn.table_names(limit=100_000))
    for record_type in record_types:
        await _open_type(storage, record_type, physical.get(record_type.memory_type, record_type.memory_type), present)
    if values.get("fulltext") != FORM:
        await _migrate_fulltext(storage)
        await write_meta(meta, [{"key": "fulltext", "value": FORM}])
    storage.search = SearchIndex(storage, record_types)
    await storage.search.open()  # rebuilt if missing, caught up if a crash left it behind
    if storage.behind.journal is not None:
        await replay_journal(storage, storage.behind.journal.root)
    return storage


async def _migrate_fulltext(storage: Storage) -> None:
    """Bring a store written before Chinese was indexed as bigrams (`memos.store.fulltext`) up to
    date, once: rows whose text holds CJK get the index tokens (only the `text` column is
    rewritten) and the table's full-text index is rebuilt. English rows are left alone."""
    for name, typed in storage.tables.items():
        rows = await storage.rows(name, None, columns=["id", "text"])
        changed = [{"id": r["id"], "text": index_form(r["text"])} for r in rows
                   if r["text"] and MARK not in r["text"] and has_cjk(r["text"])]
        for start in range(0, len(changed), 1_000):
            batch = pa.Table.from_pylist(changed[start : start + 1_000], schema=pa.schema([("id", pa.string()), ("text", pa.string())]))
            # awaited here, so the loop's variables are the ones this batch needs
            await storage.write(typed.table, lambda: typed.table.merge_insert("id").when_matched_update_all().execute(batch))
        if changed:
            await storage.rebuild_text_index(name)
            log.info("full-text index of %s: %d rows with Chinese, Japanese or Korean text re-indexed", name, len(changed))

def _settle_embedder(uri: str, stored: dict[str, Any] | None, embedder: TextEmbedder | None) -> tuple[int, str | None]:
    if stored is None:
        return (embedder.dim, embedder.name) if embedder else (DEFAULT_DIM, None)
    if embedder is None:
        if stored["name"]:
            # the caller's choice (read-only commands open without one on purpose); a missing
            # local embedder was already reported once by resolve_embedder
            log.info("%s opens without an embedder: full-text search only (vectors are kept)", uri)
        return stored["dim"], stored["name"]
    if stored["dim"] != embedder.dim or (stored["name"] and stored["name"] != embedder.name):
        raise EmbeddingDimensionError(
            f"the store at {uri} holds {stored['dim']}-d vectors from {stored['name'] or 'no embedder'}, "
            f"but it was opened with {embedder.name} ({embedder.dim}-d). Open it with the original "
            f"embedder, or re-embed every record: memos reindex {uri} --embedder {embedder.name}"
        )
    if stored["name"] is None:
        log.warning("%s was built without an embedder; run `memos reindex %s` to add vectors to old records", uri, uri)
    return embedder.dim, embedder.name

async def _open_type(storage: Storage, record_type: type[MemoryRecord], physical: str, present: set[str]) -> None:
    schema = arrow_schema(record_type, storage.dim)
    if physical in present:
        table = await storage.conn.open_table(physical)  # its schema may predate fields added since
    else:
        table = await storage.conn.create_table(physical, schema=schema, exist_ok=True)
    existing = await table.schema()
    missing = [f for f in schema if f.name not in existing.names]
    if missing:  # a custom type gained fields: add them as empty columns
        await storage.write(table, lambda: table.add_columns({f.name: f"CAST(NULL AS {_sql_type(f.type)})" for f in missing}))
    vec = existing.field(VECTOR_COLUMN) if VECTOR_COLUMN in existing.names else None
    if vec is not None and vec.type.list_size != storage.dim:
        raise EmbeddingDimensionError(
            f"table {physical} has {vec.type.list_size}-d vectors but the store is {storage.dim}-d; run memos reindex {storage.uri}"
        )
    if not any(idx.columns == ["text"] for idx in await table.list_indices()):
        await storage.write(table, text_index(table, replace=False))
    storage.tables[record_type.memory_type] = TypeTable(record_type, table, json_columns(record_type))


_SESSION: Any = None


def _session() -> Any:
    global _SESSION
    if _SESSION is None:
        _SESSION = lancedb.Session(index_cache_size_bytes=CACHE_BYTES["index"], metadata_cache_size_bytes=CACHE_BYTES["metadata"])
    return _SESSION


def _sql_type(data_type: pa.DataType) -> str:
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP"
    if pa.types.is_boolean(data_type):
        return "BOOLEAN"
    if pa.types.is_int64(data_type):
        return "BIGINT"
    if pa.types.is_floating(data_type):
        return "DOUBLE"
    return "STRING"
