"""Pure chunking of documents into resource records."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memos.documents import chunk_text, resources_from_text


def test_paragraphs_are_kept_whole_and_long_ones_split_at_sentences():
    text = "Short intro.\n\n" + "A sentence here. " * 200 + "\n\nThe end."
    chunks = chunk_text(text, max_chars=500)
    assert chunks[0].startswith("Short intro.") and chunks[-1].endswith("The end.")
    assert all(len(c) <= 500 for c in chunks)


def test_a_word_longer_than_a_chunk_is_cut_not_lost():
    chunks = chunk_text("x" * 1200, max_chars=500)
    assert "".join(chunks) == "x" * 1200 and all(len(c) <= 500 for c in chunks)


@given(st.text(max_size=3000), st.integers(50, 800))
def test_no_text_is_lost_and_no_chunk_is_too_long(text, limit):
    chunks = chunk_text(text, max_chars=limit)
    assert all(len(c) <= limit for c in chunks)
    squash = lambda s: "".join(s.split())  # noqa: E731 (whitespace between pieces may change)
    assert squash("".join(chunks)) == squash(text.replace("\x00", ""))


def test_resources_carry_title_order_and_uri():
    records = resources_from_text("notes.txt", "one\n\ntwo\n\nthree", uri="/tmp/notes.txt", max_chars=5)
    assert [(r.chunk_index, r.content) for r in records] == [(0, "one"), (1, "two"), (2, "three")]
    assert {r.title for r in records} == {"notes.txt"} and records[0].uri == "/tmp/notes.txt"
    assert resources_from_text("empty", "  \n\n ") == []
