"""What a conversation turn says, less its pleasantries, for a packed budget.

Chat is full of sentences that carry no fact: "Thanks, Caroline!", "Wow, that's awesome!",
"Talk to you soon!", `哈哈，太棒了！`. A turn recalled into a prompt is packed with its
words counted against the budget, and on LOCOMO such sentences are 6.6% of the turns' tokens:
a budget spent on them is not spent on the next turn that holds a fact. `without_pleasantries`
drops every sentence made only of greetings, thanks, interjections, praise and agreement (a
name the speaker addresses may stand beside them: "Hey Mel!") and keeps every other sentence
exactly as written, in English, Chinese or both. A turn that is nothing but pleasantries is
kept whole: it was recalled for itself. Only packed memories are rendered this way
(`memos.retrieval.packing`); stored text, its index and the recent turns of a chat are untouched.
"""

from __future__ import annotations

import functools
import re

__all__ = ["LONGEST", "without_pleasantries"]

_WORDS = frozenset("""
wow oh ooh hey hi hello yeah yes yep yup ok okay sure haha hahaha lol hmm ah aw aww omg woah whoa woo wooo yay
thanks thank thx ty congrats congratulations cheers bye goodbye
awesome great cool amazing nice fantastic wonderful incredible sweet lovely neat fabulous brilliant impressive
so really totally absolutely definitely super very too just such pretty indeed much lot
a an the that that's thats this it it's its is was be sounds sound looks look you your you're for to of and
me i i'm agree agreed same here good fun true right well of course luck take care soon talk later see ya
""".split())
"""Words a pleasantry is made of. Feelings (happy, glad, proud) and what a sentence is about
are not among them: "I'm happy." may be the fact asked for."""

_MARKS = _WORDS - frozenset("""
so really just such pretty much lot a an the that that's thats this it it's its is was be sounds sound looks look you your
you're for to of and me i i'm same here good fun true right well take see ya
""".split())
"""The words that make a sentence a pleasantry (the others only hold one together): "A." and
"I see." are not."""

_GREETING = frozenset({"hey", "hi", "hello", "thanks", "thank", "congrats", "congratulations", "bye", "wow", "cheers"})

_ZH = sorted("""
谢谢 多谢 哈哈 呵呵 嘿嘿 哇塞 哇 嗯 哦 噢 嗨 你好 早上好 晚上好 太棒了 真棒 好棒 太好了 好的 好吧 好啊 是的 是啊
对啊 对 没错 当然 恭喜 加油 真酷 酷 真厉害 厉害 不错 同意 我也是 回头聊 再见 拜拜 改天聊
""".split(), key=len, reverse=True)
_ZH_FILLER = re.compile("|".join(map(re.escape, _ZH)))
_ZH_LEFT = re.compile(r"[了吧呢啦嘛哈呀啊哦的你您\s\W_]+")
"""Particles and the listener's pronoun that may be left once the phrases are taken out."""
_LOWER_WORD = re.compile(r"[a-z]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_BREAK = re.compile(r"(?<=[.!?…])(?=\s)|(?<=[。！？～\n])")
"""Where a sentence ends: after . ! ? … before a space (not in "3.5" nor "e.g."), after 。！？～, at a line's end."""
LONGEST = 1_000
"""Characters: a longer text (an essay, a document) is packed as it is. Its pleasantries are a
negligible share of it (0.04% of LongMemEval's tokens), and splitting it cost ~0.4 ms a text."""
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")


@functools.lru_cache(maxsize=8192)
def without_pleasantries(said: str) -> str:
    """`said` without its sentences of pleasantries only; `said` itself if that leaves nothing.
    Remembered per text: a budgeted search prices, measures and renders each line."""
    if len(said) > LONGEST:
        return said
    pieces = [piece for piece in _BREAK.split(said) if piece]
    if len(pieces) < 2:  # one sentence: a pleasantry alone is kept whole
        return said
    kept = [piece for n, piece in enumerate(pieces) if not (_starts(piece, n) and _marked(piece) and _pleasantry(piece))]
    if len(kept) == len(pieces) or not any(piece.strip() for piece in kept):
        return said
    return "".join(kept).strip()


def _marked(text: str) -> bool:
    """Whether `text` holds a word or phrase every pleasantry holds (a set lookup a word: the cheap
    test before a sentence is read word by word)."""
    return not _MARKS.isdisjoint(_LOWER_WORD.findall(text.lower())) or bool(_CJK.search(text) and _ZH_FILLER.search(text))


def _starts(piece: str, n: int) -> bool:
    """Whether a piece begins a sentence: the first, or one that opens with a capital or in
    Chinese ("e.g. this." does not make "this." a sentence of its own)."""
    head = piece.lstrip()[:1]
    return n == 0 or head.isupper() or bool(_CJK.match(head))


def _pleasantry(sentence: str) -> bool:
    """Whether a sentence is greetings, thanks, interjections, praise and agreement only."""
    chinese = _CJK.search(sentence) is not None
    rest = _ZH_FILLER.sub(" ", sentence) if chinese else sentence
    zh = rest != sentence
    if chinese and _CJK.search(_ZH_LEFT.sub("", _WORD.sub("", rest))):
        return False  # Chinese words besides the pleasantries
    words = [w.replace("’", "'") for w in _WORD.findall(rest)]
    others = [w for w in words if w.lower() not in _WORDS]
    if not others:
        return zh or any(w.lower() in _MARKS for w in words)
    if len(others) > 1 or not others[0][0].isupper() or not (zh or any(w.lower() in _MARKS for w in words)):
        return False
    name = others[0]  # one capitalised word: a pleasantry only if it names whom it is said to
    at = words.index(name)
    n = re.escape(name)
    return (at > 0 and words[at - 1].lower() in _GREETING) or bool(re.search(rf",\s*{n}\b|^\W*{n}\s*,", sentence))
