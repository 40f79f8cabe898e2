"""Re-embed every record into fresh tables, then switch to them in one meta write.

Used when the embedder changes (another model, another dimension) or a store built in
full-text-only mode gains vectors. The old tables stay until the switch is recorded, so a
crash mid-way leaves the store as it was. No other open of the store may be live meanwhile
(`memos.store.lancedb.openers`): one would go on writing to the old tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from memos.embeddings import TextEmbedder
from memos.store.schema import arrow_schema

from .errors import retry_conflicts
from .storage import Storage, TypeTable
from .text_index import text_index

__all__ = ["rebuild_tables"]


async def rebuild_tables(storage: Storage, embedder: TextEmbedder,
                         progress: Callable[[int, int], None] | None = None) -> int:
    """Rebuild each type's table with `embedder`'s vectors; returns the number of rows re-embedded.
    It needs the store to itself (`memos.store.lancedb.openers`): with another open live it writes nothing.

    `progress(done, total)` is called as rows are embedded (batches of 256, or the embedder's own
    call size when larger: the local encoder pads less in longer calls)."""
    with storage.openers.alone():
        return await _rebuild(storage, embedder, progress)


async def _rebuild(storage: Storage, embedder: TextEmbedder, progress: Callable[[int, int], None] | None) -> int:
    await storage.settle()  # what this open has queued goes to the tables rebuilt from
    total = sum([await t.table.count_rows() for t in storage.tables.values()]) if progress else 0
    meta = await storage.get_meta()
    physical: dict[str, str] = json.loads(meta.get("tables", "{}"))
    generation = int(meta.get("generation", "0")) + 1
    built: dict[str, TypeTable] = {}
    done = 0
    for name, old in storage.tables.items():
        rows = await storage.rows(name, None)
        records = [old.to_record(r) for r in rows]
        for record in records:
            record.text = record.search_text()
        vectors: list[list[float]] = []
        step = max(256, embedder.batch_size)
        for start in range(0, len(records), step):
            vectors += await embedder.embed_documents([r.index_text() for r in records[start:start + step]])
            if progress:
                progress(done + len(vectors), total)
        new_name = f"{name}_g{generation}"
        table = await storage.conn.create_table(new_name, schema=arrow_schema(old.record_type, embedder.dim), mode="overwrite")
        if records:
            await table.add([old.to_row(r, v) for r, v in zip(records, vectors, strict=True)])
        await retry_conflicts(text_index(table, replace=False))
        built[name] = TypeTable(old.record_type, table, old.json_cols)
        physical[name] = new_name
        done += len(records)
    old_names = {name: t.table.name for name, t in storage.tables.items()}
    await storage.set_meta("tables", json.dumps(physical))
    await storage.set_meta("generation", str(generation))
    await storage.set_meta("embedder", json.dumps({"name": embedder.name, "dim": embedder.dim}))
    storage.tables = built
    storage.reads.clear()  # new tables start their own versions: nothing read from the old ones holds
    storage.dim = embedder.dim
    storage.embedder_name = embedder.name
    await storage.search.rebuild()  # the shared search table carries the old vectors (memos.store.lancedb.search_index)
    for old_name in old_names.values():
        await storage.conn.drop_table(old_name)
    return done
