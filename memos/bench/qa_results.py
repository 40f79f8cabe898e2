"""The results file of `memos bench qa`: JSON lines written as the run goes, so it can resume.

The first line is the run's configuration and its hash; then one line per conversation once it
is ingested (`kind: "ingested"`) and one per question once it is answered and judged
(`kind: "answer"`, keyed `<sample_id>#<index in the sample's qa list>`). Every line is flushed
and synced as it is written: a run that stops keeps what it finished, and a rerun with the same
file skips it. A rerun with another configuration is refused (answers of two configurations
would be mixed in one figure) unless it restarts. The report is computed from the file's
lines, so a resumed run reports every question, not only the last run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memos.exceptions import ConfigError

from ._stats import percentiles

__all__ = ["ResultsFile", "config_hash", "summarise"]


def config_hash(config: Mapping[str, Any]) -> str:
    """A short stable hash of a configuration (its JSON with sorted keys)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ResultsFile:
    """The JSON-lines file of one run configuration; `done` and `ingested` say what it holds."""

    def __init__(self, path: Path, config: dict[str, Any], *, restart: bool = False) -> None:
        self.path = path
        self.config = config
        self.hash = config_hash(config)
        self.records: list[dict[str, Any]] = []
        self.ingested: set[str] = set()
        if restart and path.exists():
            path.unlink()
        if path.exists():
            self._resume()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"kind": "config", "hash": self.hash, "config": config})
        self.resumed = len(self.records)
        """Questions answered by earlier runs into this file."""

    @property
    def done(self) -> set[str]:
        """Keys of the questions already answered."""
        return {r["key"] for r in self.records}

    def _resume(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        kept = 0  # bytes of whole, readable lines
        rows = []
        for number, line in enumerate(lines):
            if not line.strip():
                kept += len(line) + 1
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                if number < len(lines) - 1 and any(rest.strip() for rest in lines[number + 1:]):
                    raise ConfigError(f"{self.path} line {number + 1} is not JSON; it is not a memos bench qa results "
                                      f"file, or it was edited (use another --out, or --restart)") from None
                break  # the last line, cut short by an interrupted run: dropped and written again
            kept += len(line) + 1
        if kept < len(raw):
            with self.path.open("r+b") as handle:
                handle.truncate(kept)
        if not rows or rows[0].get("kind") != "config":
            raise ConfigError(f"{self.path} is not a memos bench qa results file (no configuration line); use another --out")
        if rows[0].get("hash") != self.hash:
            before = rows[0].get("config", {})
            changed = sorted(k for k in {*before, *self.config} if before.get(k) != self.config.get(k))
            raise ConfigError(f"{self.path} holds results of another configuration ({', '.join(changed)} differ: "
                              + "; ".join(f"{k} was {before.get(k)!r}, now {self.config.get(k)!r}" for k in changed)
                              + "); answers of two configurations are not mixed: use another --out, or --restart to start it over")
        for row in rows[1:]:
            if row.get("kind") == "answer":
                self.records.append(row)
            elif row.get("kind") == "ingested":
                self.ingested.add(row["sample_id"])

    def _write(self, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def add_ingested(self, sample_id: str, **details: Any) -> None:
        """Record that `sample_id`'s turns are all in the store."""
        self._write({"kind": "ingested", "sample_id": sample_id, **details})
        self.ingested.add(sample_id)

    def add_answer(self, row: dict[str, Any]) -> None:
        """Record one answered (and judged) question."""
        row = {"kind": "answer", **row}
        self._write(row)
        self.records.append(row)


def _usage(rows: list[dict[str, Any]], field: str) -> dict[str, Any] | None:
    """Summed token usage of one model over the rows, and per question; None if it reported none."""
    totals = {k: sum(int((r.get(field) or {}).get(k) or 0) for r in rows) for k in ("requests", "input_tokens", "output_tokens")}
    if not totals["input_tokens"] and not totals["output_tokens"]:
        return None
    n = max(1, len(rows))
    return {**totals, "input_tokens_per_question": round(totals["input_tokens"] / n, 1),
            "output_tokens_per_question": round(totals["output_tokens"] / n, 1)}


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The report of a set of answer rows: J overall and by category, errors, tokens, latency.

    J is the fraction of questions the judge called CORRECT; a question whose answer or
    judgement failed counts in n and is not correct (it is counted apart, too)."""
    n = len(records)
    correct = sum(r.get("verdict") == "CORRECT" for r in records)
    by_category: dict[str, dict[str, Any]] = {}
    for category in sorted({int(r["category"]) for r in records}):
        rows = [r for r in records if int(r["category"]) == category]
        right = sum(r.get("verdict") == "CORRECT" for r in rows)
        by_category[str(category)] = {"n": len(rows), "correct": right, "J": round(right / len(rows), 3)}
    tokens = [int(r["context_tokens"]) for r in records]
    return {
        "questions": n,
        "correct": correct,
        "J": round(correct / n, 3) if n else 0.0,
        "by_category": by_category,
        "judge_errors": sum(bool(r.get("judge_error")) for r in records),
        "answer_errors": sum(bool(r.get("answer_error")) for r in records),
        "context_tokens": {"mean": round(statistics.fmean(tokens), 1) if tokens else 0.0,
                           "median": round(statistics.median(tokens), 1) if tokens else 0.0},
        "search_ms": percentiles([float(r["search_ms"]) for r in records]),
        "answer_ms": percentiles([float(r["answer_ms"]) for r in records if r.get("answer_ms") is not None]),
        "judge_ms": percentiles([float(r["judge_ms"]) for r in records if r.get("judge_ms") is not None]),
        "answer_usage": _usage(records, "answer_usage"),
        "judge_usage": _usage(records, "judge_usage"),
    }
