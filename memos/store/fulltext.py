"""How text meets the full-text index: Chinese (and Japanese, Korean) runs as overlapping bigrams.

LanceDB's "simple" tokenizer splits on spaces and punctuation, so a Chinese clause, written
without spaces, was one token: `羽毛球` found nothing in `我周末在杭州打羽毛球`. The index keeps
the simple tokenizer (English keeps its words, stemming and stop words, and an English text is
indexed exactly as before) and the CJK runs are spelled out for it: every character and every
pair of neighbouring characters becomes a token, appended to the indexed text after a marker.
A query's CJK runs become the same tokens, less particles and question words, so a word of two
or more characters matches wherever it stands in a clause, whatever the segmentation.

Why not the alternatives (measured on `tests/data/zh_conversation.json`, see README):
LanceDB's n-gram tokenizer turns English into character n-grams too (no stemming, no stop
words); its ICU tokenizer lost short English words (`cat`, `dog` matched nothing); a
dictionary segmenter (jieba, measured through `rjieba`) misses words its dictionary splits
differently in the query and the text (`半马用`), which bigrams cannot miss: its words in place
of or beside the bigrams gave top-3 0.58-0.63 full-text only against the bigrams' 0.667.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["FORM", "MARK", "cjk_share", "has_cjk", "index_form", "plain_text", "query_words", "without_mark"]

FORM = "cjk-bigrams-1"
"""The version of `index_form` a store's text column was written with (kept in its meta); a
store opened with an older one is migrated once (`memos.store.lancedb.opening.open_storage`)."""

MARK = "\x1f"
"""Separates a record's text from the CJK tokens appended for the index (a separator for the
tokenizer, never typed by a user)."""

_CJK = (
    "\u3040-\u30ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002ffff"  # ideograph extensions
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_HAS_CJK = re.compile(f"[{_CJK}]")
_WORD = re.compile(r"\w+", re.UNICODE)
_FUNCTION_CHARS = frozenset("的了吗呢吧啊呀嘛么哪谁什怎几是在个这那")
"""Particles, question words and measure words: a query bigram holding one (`什么`, `的猫`,
`在哪`) matches every question asked in a conversation, not the answer, so a query leaves it out
(the index keeps it; a query made only of such bigrams keeps them all). The English side's
stop words do the same job there."""
_FUNCTION_BIGRAMS = frozenset({"时候", "多少", "为何", "如何", "一下", "一天", "哪天"})


def has_cjk(text: str) -> bool:
    """Whether `text` holds any Chinese, Japanese or Korean character."""
    return _HAS_CJK.search(text) is not None


def cjk_share(text: str) -> float:
    """The share of `text`'s word characters that are CJK: 0 for English, 1 for plain Chinese,
    between for a mixed query (`羽毛球 running` is 3 of 10)."""
    chars = "".join(_WORD.findall(text))
    return sum(1 for c in chars if _HAS_CJK.match(c)) / len(chars) if chars else 0.0


def _pieces(word: str, *, unigrams: bool) -> list[str]:
    """The tokens for one `\\w+` word holding CJK: its other pieces (a `5` in `5月`, `iPhone`
    in `iPhone很好用`) as words, each CJK run as its bigrams (and characters, if `unigrams`)."""
    out: list[str] = []
    at = 0
    for run in _CJK_RUN.finditer(word):
        if run.start() > at:
            out.append(word[at:run.start()])
        chars = run.group()
        if unigrams or len(chars) == 1:
            out.extend(chars)
        out.extend(chars[i:i + 2] for i in range(len(chars) - 1))
        at = run.end()
    if at < len(word):
        out.append(word[at:])
    return out


def without_mark(text: str) -> str:
    """`text` with any `MARK` a user typed made a space: the stored text is cut at the first one."""
    return text.replace(MARK, " ") if MARK in text else text


def plain_text(stored: str) -> str:
    """A stored `text` without the tokens `index_form` appended."""
    head, mark, _ = stored.partition(MARK)
    return head[:-1] if mark and head.endswith(" ") else head


def index_form(text: str, own: str | None = None) -> str:
    """What the full-text column holds for `text`: the text itself, and when it has CJK, the
    marker and the tokens of its CJK words. `own`, a prefix of `text`, is the record's own
    words (`index_text()`); the rest is context borrowed from around it (the turn before), whose
    CJK runs give bigrams only, so borrowed words weigh less than a record's own (top-3 on the
    Chinese set: 34 -> 38 of 57). Idempotent; an English text is returned as is."""
    text = plain_text(text)
    if text.isascii() or (not has_cjk(text) and unicodedata.is_normalized("NFKC", text)):
        return text
    own = text if own is None or not text.startswith(own) else own
    tokens = _tokens(own, unigrams=True) + _tokens(text[len(own):], unigrams=False)
    return f"{text} {MARK} {' '.join(tokens)}" if tokens else text


def _tokens(text: str, *, unigrams: bool) -> list[str]:
    """The index tokens `index_form` appends for `text`: its CJK words' pieces, and the words that
    NFKC spells otherwise (full-width `Ｇｏｏｇｌｅ` is also `Google`, `２０２５年` also `2025年`),
    so a query in either width finds it (`query_words` normalises the same way)."""
    folded = unicodedata.normalize("NFKC", text)
    if folded == text:
        return [t for word in _WORD.findall(text) if has_cjk(word) for t in _pieces(word, unigrams=unigrams)]
    own = set(_WORD.findall(text))
    return [t for word in _WORD.findall(folded) if has_cjk(word) or word not in own
            for t in (_pieces(word, unigrams=unigrams) if has_cjk(word) else [word])]


def query_words(text: str) -> str:
    """A query as plain words for the full-text index (no operators, quotes or field syntax);
    its CJK runs as characters and bigrams, matching what `index_form` indexed (a character
    finds `猫` in `蓝猫，叫豆豆` where the bigram `猫叫` of the query does not; BM25 weighs a
    common character low). A word NFKC spells otherwise (full-width `Ｇｏｏｇｌｅ`) is asked
    both ways: records indexed before both were indexed hold it as typed."""
    typed = _WORD.findall(text)
    folded = unicodedata.normalize("NFKC", text)
    seen = set(typed)
    words: list[str] = []
    for word in typed + ([w for w in _WORD.findall(folded) if w not in seen] if folded != text else []):
        if not has_cjk(word):
            words.append(word)
            continue
        pieces = _pieces(word, unigrams=True)
        content = [p for p in pieces if not _is_function(p)]
        words.extend(content or pieces)
    return " ".join(words)


def _is_function(token: str) -> bool:
    return has_cjk(token) and (token in _FUNCTION_BIGRAMS or any(c in _FUNCTION_CHARS for c in token))
