"""Processes for the concurrency probes (`tests/test_concurrency.py`): run as scripts, never forked.

    python tests/_probes.py writer DB SIDE USER STOP SEED   adds / updates / deletes facts, acks each to SIDE
    python tests/_probes.py reader DB STOP OUT              searches and lists until STOP exists
    python tests/_probes.py worker DB SECONDS LOG           `memos worker` (full-text only), logging to LOG
    python tests/_probes.py churn DB                         adds duplicates and consolidates them, forever (to be killed)

A writer acknowledges an operation (a line in SIDE, fsynced) only after the call returned; before
an update or delete it writes what it tries, so a check can tell "maybe applied" from "acknowledged".
`verify` reads a store back and counts what the acknowledgements say must hold.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("LANCE_LOG", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def writer(db: str, side: str, user: str, stop: str, seed: int) -> None:
    from memos.memtypes import Fact

    from memos import MemoryOS, Scope

    rng = random.Random(seed)
    mem = MemoryOS.open_sync(db, embedder=None)
    scope = Scope(user, "a", "s")
    live: list[str] = []
    texts: dict[str, tuple[str, str]] = {}
    n = 0
    with open(side, "a") as acks:
        def ack(line: str) -> None:
            acks.write(line + "\n")
            acks.flush()
            os.fsync(acks.fileno())

        ack("ready")
        while not Path(stop).exists():
            try:
                roll = rng.random()
                if roll < 0.25 and live:
                    rid = rng.choice(live)
                    value = round(0.6 + 0.39 * rng.random(), 4)
                    ack(f"try-upd {rid} {value}")
                    mem.update_sync(scope, "semantic", rid, {"importance": value})
                    ack(f"upd {rid} {value}")
                elif roll < 0.35 and len(live) > 5:
                    rid = live.pop(rng.randrange(len(live)))
                    ack(f"try-del {rid}")
                    mem.delete_sync(scope, "semantic", rid)
                    ack(f"del {rid}")
                else:
                    facts = [Fact(subject=f"{user} item {n + i}", summary=f"{user} note {n + i} filed under {rng.random():.6f}",
                                  importance=0.5) for i in range(2)]
                    if texts and rng.random() < 0.2:  # a duplicate of an earlier fact, for consolidation to merge
                        subject, summary = texts[rng.choice(list(texts))]
                        facts[1] = Fact(subject=subject, summary=summary, importance=0.5)
                    texts.update({f.id: (f.subject, f.summary) for f in facts})
                    for f in facts:
                        ack(f"try-add {f.id}")
                    mem.add_sync(scope, facts)
                    for f in facts:
                        ack(f"add {f.id}")
                        live.append(f.id)
                    n += 2
            except Exception as exc:  # counted: the probe reports every error a writer saw
                ack(f"err {type(exc).__name__} {str(exc).splitlines()[0][:200] if str(exc) else ''}")
                time.sleep(0.05)


def reader(db: str, stop: str, out: str) -> None:
    from memos import MemoryOS, Scope

    mem = MemoryOS.open_sync(db, embedder=None)
    done, errors = 0, Counter()
    while not Path(stop).exists():
        for user in ("w0", "w1", "w2", "w"):
            try:
                mem.search_sync("note filed", Scope(user), k=5)
                mem.list_sync(Scope(user), "semantic", limit=20)
                done += 1
            except Exception as exc:  # counted
                errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
    Path(out).write_text(f"{done}\n" + "\n".join(f"{n} {e}" for e, n in errors.items()))


def worker(db: str, seconds: str, log_file: str) -> None:
    import logging

    from memos.jobs.worker import run_worker

    logging.basicConfig(filename=log_file, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run_worker(db, embedder=None, duration=float(seconds))


def churn(db: str) -> None:
    from memos.memtypes import Fact

    from memos import MemoryOS, Scope
    from memos.jobs.runs import consolidate

    mem = MemoryOS.open_sync(db, embedder=None)
    scope = Scope("churn", "a", "s")
    print("ready", flush=True)
    n = 0
    while True:
        mem.add_sync(scope, [Fact(subject=f"thing {n % 7}", summary=f"thing {n % 7} is kept in box {n % 5}") for _ in range(3)])
        n += 1
        from memos._sync import run_sync

        run_sync(consolidate(mem, scope))


def read_acks(side: Path) -> dict[str, Any]:
    """What a writer's acknowledgements promise."""
    added, maybe_added, deleted, maybe_deleted, errors = set(), set(), set(), set(), []
    updates: dict[str, list[tuple[str, float]]] = {}
    for line in side.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "add":
            added.add(rest)
        elif kind == "try-add":
            maybe_added.add(rest)
        elif kind == "del":
            deleted.add(rest)
        elif kind == "try-del":
            maybe_deleted.add(rest)
        elif kind in ("upd", "try-upd"):
            rid, value = rest.split()
            updates.setdefault(rid, []).append((kind, float(value)))
        elif kind == "err":
            errors.append(rest)
    return {"added": added, "maybe_added": maybe_added, "deleted": deleted, "maybe_deleted": maybe_deleted,
            "updates": updates, "errors": errors}


def verify(db: Path, sides: dict[str, Path]) -> dict[str, Any]:
    """Read the whole store and count broken promises (every count should be 0)."""
    from memos import MemoryOS, Scope
    from memos._sync import run_sync

    mem = MemoryOS.open_sync(db, embedder=None)
    storage = mem.storage
    for name in mem.type_names:  # every table reads whole
        run_sync(storage.rows(name, None))
    history = run_sync(storage.raw_history("true"))
    run_sync(storage.get_meta())
    created = {h["record_id"] for h in history if h["op"] == "add"}
    merged_into: dict[str, list[tuple[float, float]]] = {}  # survivor id -> (importance before, after) per merge
    for h in history:
        if h["op"] == "merge" and h["before"] and h["after"]:
            before, after = json.loads(h["before"]), json.loads(h["after"])
            if before.get("status") == after.get("status") == "active":
                merged_into.setdefault(h["record_id"], []).append((float(before["importance"]), float(after["importance"])))
    out = Counter(lost=0, duplicated=0, lost_updates=0, resurrected=0, without_history=0, acked=0)
    for user, side in sides.items():
        acks = read_acks(side)
        rows = run_sync(storage.rows("semantic", f"user_id = '{user}'"))
        seen = Counter(r["id"] for r in rows)
        by_id = {r["id"]: r for r in rows}
        out["acked"] += len(acks["added"]) + len(acks["deleted"]) + sum(1 for u in acks["updates"].values() for k, _ in u if k == "upd")
        for rid in acks["added"] - acks["maybe_deleted"]:
            out["lost"] += seen[rid] == 0
        out["duplicated"] += sum(1 for rid, n in seen.items() if n > 1)
        out["resurrected"] += sum(1 for rid in acks["deleted"] if seen[rid])
        for rid, history_of in acks["updates"].items():
            if rid not in by_id:
                continue
            last = max((i for i, (k, _) in enumerate(history_of) if k == "upd"), default=None)
            if last is None:
                continue
            allowed = {history_of[last][1]} | {v for k, v in history_of[last + 1:]}
            grown = True  # a merge on top of an allowed version may raise a survivor's importance (the duplicates' max)
            while grown:
                more = {a for b, a in merged_into.get(rid, ()) if any(abs(b - v) <= 1e-6 for v in allowed)} - allowed
                allowed |= more
                grown = bool(more)
            out["lost_updates"] += all(abs(by_id[rid]["importance"] - v) > 1e-6 for v in allowed)
        out["without_history"] += sum(1 for rid in seen if rid not in created)
        out["writer_errors"] += len(acks["errors"])
    for name in mem.type_names:  # every record of every store has its creation in history
        if name == "semantic":
            continue
        out["without_history"] += sum(1 for r in run_sync(storage.rows(name, None, columns=["id"])) if r["id"] not in created)
    del Scope
    return dict(out)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "writer":
        writer(args[0], args[1], args[2], args[3], int(args[4]))
    elif role == "reader":
        reader(*args)
    elif role == "worker":
        worker(*args)
    elif role == "churn":
        churn(*args)
    else:
        raise SystemExit(f"unknown role {role}")
