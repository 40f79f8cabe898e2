"""Documents into resource memory: pure chunking of text into `Resource` records."""

from __future__ import annotations

import re

from .memtypes import Resource
from .memtypes.resource import ResourceType

__all__ = ["MAX_CHUNK_CHARS", "chunk_text", "resources_from_text"]

MAX_CHUNK_CHARS = 1500
"""A chunk holds whole paragraphs up to this size; a longer paragraph is split at sentences, then words."""

_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCES = re.compile(r"(?<=[.!?])\s+")


def _pieces(paragraph: str, limit: int) -> list[str]:
    if len(paragraph) <= limit:
        return [paragraph]
    out: list[str] = []
    for sentence in _SENTENCES.split(paragraph):
        while len(sentence) > limit:  # a sentence longer than a chunk: cut at the last space before the limit
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > 0 else limit
            out.append(sentence[:cut])
            sentence = sentence[cut:].lstrip()
        out.append(sentence)
    return [p for p in out if p]


def chunk_text(text: str, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """Split `text` into chunks of whole paragraphs (or sentences) of at most `max_chars`; nothing is dropped."""
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in _PARAGRAPHS.split(text.replace("\x00", ""))):
        for piece in _pieces(paragraph, max_chars) if paragraph else []:
            if current and len(current) + 2 + len(piece) > max_chars:
                chunks.append(current)
                current = piece
            else:
                current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def resources_from_text(title: str, text: str, *, uri: str = "", resource_type: ResourceType = "document",
                        max_chars: int = MAX_CHUNK_CHARS) -> list[Resource]:
    """One `Resource` per chunk, in order, each naming its document and position."""
    chunks = chunk_text(text, max_chars)
    summary = chunks[0][:200] if chunks else ""
    return [Resource(title=title[:512], uri=uri[:2048], resource_type=resource_type, summary=summary, content=chunk,
                     chunk_index=i) for i, chunk in enumerate(chunks)]
