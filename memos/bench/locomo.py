"""Reading the LOCOMO format (conversations with dated sessions, and evidence-tagged QA).

Only the turns are read: a turn is a message whose time is its session's date (plus its
position, so turns keep their order) and whose provenance id is its `dia_id`. The
dataset's own summaries and observations are never used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memos.exceptions import ConfigError
from memos.ingest import Message

__all__ = ["Conversation", "Question", "load_locomo", "parse_locomo_time", "parse_question_date"]

RETRIEVAL_CATEGORIES = (1, 2, 3, 4)


@dataclass(frozen=True)
class Question:
    """A question with the dia_ids of the turns that hold its answer."""

    text: str
    evidence: tuple[str, ...]
    category: int
    asked_at: datetime | None = None
    """When the question is asked (a set's `question_date`, e.g. LongMemEval's), else None: the
    search then reckons "last week" from the memory's clock."""


@dataclass(frozen=True)
class Conversation:
    """One LOCOMO sample: its turns as messages and its retrieval questions."""

    sample_id: str
    messages: list[Message]
    questions: list[Question]


def parse_locomo_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def parse_question_date(text: str | None) -> datetime | None:
    """A qa item's `question_date` ('2023/05/27 (Sat) 03:27', or ISO) -> an aware UTC datetime;
    None when there is none."""
    if not text:
        return None
    cleaned = re.sub(r"\s*\([A-Za-z]{3}\)", "", text.strip())
    for layout in ("%Y/%m/%d %H:%M", "%Y/%m/%d"):
        try:
            return datetime.strptime(cleaned, layout).replace(tzinfo=UTC)
        except ValueError:
            continue
    try:
        when = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ConfigError(f"question_date {text!r} is not a date (e.g. '2023/05/27 (Sat) 03:27' or ISO 8601)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _image(caption: str) -> str:
    """An image turn's details, from its caption: "photo of a dog on a leash" (rendered after
    the turn's text in brackets). The captions all begin "a photo of" or "a photography of";
    "shared an image: a photo of" said the same in five more tokens."""
    return re.sub(r"^an? (photo|photography) of ", "photo of ", caption.strip())


def _messages(conv: dict[str, Any]) -> list[Message]:
    out = []
    n = 1
    while f"session_{n}" in conv:
        start = parse_locomo_time(conv[f"session_{n}_date_time"])
        for i, turn in enumerate(conv[f"session_{n}"]):
            out.append(
                Message(
                    id=turn["dia_id"],
                    actor=turn["speaker"],
                    text=turn["text"],
                    timestamp=start + timedelta(seconds=30 * i),
                    details=_image(turn["blip_caption"]) if turn.get("blip_caption") else "",
                )
            )
        n += 1
    return out


def _evidence(items: list[str]) -> tuple[str, ...]:
    """A question's evidence dia_ids. The released files sometimes list two turns in one string
    (`"D8:6; D9:17"` in conv-26), which no turn's id equals: it is split into its ids."""
    return tuple(part for item in items for part in re.split(r"[;,\s]+", item) if part)


def load_locomo(path: str | Path, categories: tuple[int, ...] = RETRIEVAL_CATEGORIES) -> list[Conversation]:
    """Conversations and their questions of the chosen categories from a LOCOMO json file."""
    data = json.loads(Path(path).read_text())
    return [
        Conversation(
            sample_id=sample["sample_id"],
            messages=_messages(sample["conversation"]),
            questions=[
                Question(q["question"], _evidence(q.get("evidence", [])), int(q["category"]), parse_question_date(q.get("question_date")))
                for q in sample["qa"]
                if int(q["category"]) in categories and q.get("evidence")
            ],
        )
        for sample in data
    ]
