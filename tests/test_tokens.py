"""Token counts of long texts are summed line by line (`memos.tokens`): the same figure as
counting the text whole, for every encoding memos uses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memos.tokens import Tokenizer

_ALPHABET = st.sampled_from(list("ab Zz09\n\n\t /<>-_.,:;'\"!?()[]{}#*$%&@^~`|\\+=") + ["羽毛球", "。", "é", "ß", "—", "🙂",
                                                                                         "'s", "'ll", "\r\n", "   ", "2023-05-08"])
_TEXT = st.lists(_ALPHABET, min_size=0, max_size=1500).map("".join)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@settings(max_examples=200, deadline=None)
@given(text=_TEXT, lines=st.lists(st.text(max_size=80), max_size=60))
def test_a_long_texts_count_is_its_whole_count(encoding, text, lines):
    tokenizer = Tokenizer(encoding)
    for sample in (text, "\n".join(lines), text + "\n/" + text + "\n " + text + "\nx"):
        while len(sample) <= 2_500:  # long enough to be counted by its pieces
            sample = f"{sample}\n{sample}x" if sample else "\n"
        assert tokenizer.count(sample) == len(tokenizer._encoding.encode_ordinary(sample))
