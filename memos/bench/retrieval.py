"""`memos bench retrieval`: evidence recall at a token budget on LOCOMO.

Every turn goes in through `MemoryOS.ingest`; every question is answered by
`MemoryOS.search(..., budget_tokens=B)`, the search the agent's active retrieval runs. A
question counts as covered at B when the `source_ids` of the packed hits include all (or
any) of its evidence dia_ids. Tokens are counted with o200k_base. Beside the budgets, a plain
top-3 search (`k=3`, what a tool call returns) counts the questions whose evidence is all
(`top3_all`) or partly (`top3_any`) among its three hits, with the turns attached to them (the
reply to one that asks, the other half of an exchange: `memos.retrieval.replies`;
`top3_records`: how many records that is, on average). `halves` splits the
questions in two, alternately within each category (`a`: the 1st, 3rd, ... question of a
category; `b`: the others), so a choice tuned on one half can be checked on the other (top-3
all and recall_all@1000 per half). A question with a date (`question_date`) is searched as of
that day (`MemoryOS.search(now=...)`).

The same LOCOMO-shaped file format carries the project's Chinese set
(`tests/data/zh_conversation.json`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memos.exceptions import ConfigError
from memos.memory import MemoryOS
from memos.retrieval.packing import render_hits
from memos.store.scope import Scope

from ._stats import percentiles
from .locomo import Conversation, load_locomo

__all__ = ["BUDGETS", "run_retrieval_bench"]

BUDGETS = (500, 1000, 2000, 4000)


async def run_retrieval_bench(
    dataset_path: str | Path,
    *,
    db_path: str | Path | None = None,
    embedder: Any = "local",
    max_questions: int | None = None,
    samples: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    open_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return its JSON-ready report (`samples`: only these conversations)."""
    conversations = load_locomo(dataset_path)
    if samples:
        known = {c.sample_id for c in conversations}
        if missing := sorted(set(samples) - known):
            raise ConfigError(f"no conversation {', '.join(missing)} in {dataset_path}; it has {', '.join(sorted(known))}")
        conversations = [c for c in conversations if c.sample_id in samples]
    with tempfile.TemporaryDirectory(prefix="memos-bench-") as tmp:
        mem = await MemoryOS.open(db_path or Path(tmp) / "db", embedder=embedder, model="gpt-4o", **(open_kwargs or {}))
        report = await _run(mem, conversations, max_questions, progress)
        if "passage" in mem.types:  # opt-in (memtypes.passage): how many the long turns made
            report["passages"] = await mem.storage.count("passage")
        return report


async def _run(mem: MemoryOS, conversations: list[Conversation], max_questions: int | None, progress: Any) -> dict[str, Any]:
    turns = sum(len(c.messages) for c in conversations)
    start = time.perf_counter()
    for conv in conversations:
        await mem.ingest(Scope(conv.sample_id), conv.messages)
    ingest_s = time.perf_counter() - start

    questions = [(c, q) for c in conversations for q in c.questions][:max_questions]
    hit_all = {b: 0 for b in BUDGETS}
    hit_any = {b: 0 for b in BUDGETS}
    top3 = [0, 0]
    tokens: dict[int, list[int]] = {b: [] for b in BUDGETS}
    by_cat: dict[int, list[int]] = {}
    halves = {h: [0, 0, 0] for h in "ab"}  # questions, top-3 all, recall_all@1000
    seen_in_cat: dict[int, int] = {}
    latencies: list[float] = []
    records: list[int] = []
    for n, (conv, q) in enumerate(questions, 1):
        evidence = set(q.evidence)
        top = await mem.search(q.text, Scope(conv.sample_id), k=3, now=q.asked_at)
        records.append(sum(1 + len(h.attached) for h in top))
        first = {s for h in top for s in [*h.source_ids, *(s for a in h.attached for s in a.source_ids)]}
        half = halves["ab"[seen_in_cat.get(q.category, 0) % 2]]
        seen_in_cat[q.category] = seen_in_cat.get(q.category, 0) + 1
        half[0] += 1
        half[1] += evidence <= first
        top3[0] += evidence <= first
        top3[1] += bool(evidence & first)
        for budget in BUDGETS:
            t0 = time.perf_counter()
            hits = await mem.search(q.text, Scope(conv.sample_id), budget_tokens=budget, now=q.asked_at)
            latencies.append((time.perf_counter() - t0) * 1000)
            covered = {s for h in hits for s in h.source_ids}
            tokens[budget].append(mem.tokenizer.count(render_hits(hits)))  # what the prompt would carry
            all_in = evidence <= covered
            hit_all[budget] += all_in
            if budget == 1000:
                half[2] += all_in
            hit_any[budget] += bool(evidence & covered)
            if budget == 2000:
                by_cat.setdefault(q.category, [0, 0])
                by_cat[q.category][0] += all_in
                by_cat[q.category][1] += 1
        if progress:
            progress(n, len(questions))
    total = max(1, len(questions))
    return {
        "questions": len(questions),
        "conversations": len(conversations),
        "turns": turns,
        "recall_all": {str(b): round(hit_all[b] / total, 3) for b in BUDGETS},
        "recall_any": {str(b): round(hit_any[b] / total, 3) for b in BUDGETS},
        "top3_all": round(top3[0] / total, 3),
        "top3_any": round(top3[1] / total, 3),
        "top3_records": round(statistics.fmean(records), 2) if records else 0.0,
        "halves": {h: {"questions": v[0], "top3_all": round(v[1] / max(1, v[0]), 3),
                       "recall_all_1000": round(v[2] / max(1, v[0]), 3)} for h, v in halves.items()},
        "recall_all_by_category": {str(c): round(v[0] / max(1, v[1]), 3) for c, v in sorted(by_cat.items())},
        "tokens_used": {str(b): round(statistics.fmean(tokens[b]), 1) if tokens[b] else 0.0 for b in BUDGETS},
        "ingest_turns_per_s": round(turns / ingest_s, 1) if ingest_s else 0.0,
        "search_ms": percentiles(latencies),
    }
