"""Questions that ask for a name, and the records that say one.

"What are the names of John's children?", "Where did Caroline move from?", "Who did John go to
yoga with?", `李明的女朋友叫什么名字？`, `王芳在哪个城市工作？`: the answer is a name (a person's,
a pet's, a place's), and the record that answers says one ("his name is Kyle", "my home
country, Sweden", `我女朋友周婷`, `周末去武康路拍`) where most turns around it name nobody but
the people talking. So in budgeted searches the hits whose own words say a name, other than the
speakers' and those the question already says, score (1 + `RankingPolicy.name_weight`) times
higher: a boost, never a filter, and a question that asks for no name is ranked as before.

A name in English (and in the Latin words of mixed text) is a capitalised word that does not
open a sentence and is not a greeting, a weekday, a month or the like. Chinese writes no capitals:
a name there is read from how it is said (`叫豆豆`, `我老公张伟`, `名叫小雨`) or from a place
word's ending (`武康路`, `苏州`, `青岛`, `未来科技城`), less the common words that end the same way
(`城市`, `超市`, `小区`, `医院`).

Pure: `favour_names` takes fused hits and returns them re-ordered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memos.store.fulltext import MARK

from .ranking import Hit, RowView, boosted
from .speakers import speaker_of

__all__ = ["asks_name", "favour_names", "says_name"]

_ASKS = re.compile(
    r"(?:^|[,;:]\s*|\b(?:and|or|but)\s+)\W*(?:who|whom|whose|where)\b|\bnames?\b|\bcalled\b"
    r"|\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
    r"(?:city|cities|country|countries|state|states|place|places|town|towns|area|areas|region|regions|person|people|friends?)\b"
    r"|谁|哪里|哪儿|在哪|什么地方|名字|叫什么|叫啥|哪(?:个|座|家|所)?(?:城市|国家|地方|省|州|市|区|县|镇|村|城|学校|公司|医院|餐厅|店)",
    re.IGNORECASE)
# A capitalised word not right after a sentence's end (nor at the text's start): "Sweden" in "my
# home country, Sweden." Lookarounds, not \b: in mixed text a Latin word touches CJK letters.
_CAPITALISED = re.compile(r"(?<![.!?。！？]\s)(?<![.!?。！？])(?<![A-Za-z'’])(?<!^)([A-Z][a-z]{2,})(?:['’]s)?(?![A-Za-z])")
_NOT_NAMES = frozenset({
    "i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "oh", "hey", "hi", "hello", "yeah", "yes", "yep", "no", "nope", "wow",
    "aww", "awww", "haha", "lol", "omg", "btw", "thanks", "thank", "sure", "cool", "great", "nice", "sounds", "glad",
    "congrats", "congratulations", "hmm", "well", "also", "and", "but", "so", "anyway", "mom", "dad", "mum", "mama", "papa",
    "god", "the", "a", "an", "this", "that", "these", "those", "there", "they", "what", "when", "where", "why", "how",
    "who", "which", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february",
    "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "christmas",
    "halloween", "easter", "thanksgiving", "english", "internet", "tv"
})
_CJK = r"[\u4e00-\u9fff]"
_ZH_NAMED = re.compile(
    rf"(?:叫|名叫|叫做|名字是)(?:做)?{_CJK}{{1,3}}"  # 叫豆豆, 名叫小雨
    rf"|(?:老公|老婆|丈夫|妻子|女朋友|男朋友|女友|男友|儿子|女儿|哥哥|姐姐|弟弟|妹妹|朋友|同事|室友|同学|老师|医生)"
    rf"(?:[张王李赵刘陈杨黄周吴徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦方白邹孟熊秦邱江尹薛段雷侯龙史陶黎贺顾毛郝龚邵万钱严武戴莫孔向汤]{_CJK}{{1,2}})"
    rf"|{_CJK}{{1,4}}(?:路|街|巷|省|市|县|镇|村|州|岛|湾|滩|城|院|寺|湖|山|江)"
)
_ZH_COMMON = frozenset({
    "城市", "超市", "都市", "夜市", "市场", "门市", "股市", "菜市", "医院", "学院", "电影院", "法院", "剧院", "住院", "出院", "寺院", "院子", "小区", "山区", "一路",
    "马路", "路上", "走路", "上路", "公路", "道路", "迷路", "一路上", "半路", "街上", "逛街", "大街", "长城", "进城", "回城", "全城", "满城", "湖边", "爬山", "下山",
    "上山", "江湖", "海岛", "岛上", "沙滩", "海滩", "老家", "本市", "外省", "全省", "乡村", "农村"
})


_CHOICE = re.compile(r"[,，][^,，]*\bor\b[^,，]*[?？]\s*$|还是", re.IGNORECASE)
_QUESTION_WORDS = re.compile(r"(?<![A-Za-z])[A-Z][a-z]{2,}")  # the question's own names, its first word too


def asks_name(query: str) -> bool:
    """Whether `query` asks for a name: who / whom / whose, where, a name, which city, place or
    people (`谁`, `哪里`, `名字`, `叫什么`, `哪个城市`); not a question that offers its own
    answers to choose from ("Who became a parent first, Rachel or Alex?", `先去北京还是上海？`)."""
    return _ASKS.search(query) is not None and _CHOICE.search(query) is None


def says_name(text: str, known: Iterable[str] = ()) -> bool:
    """Whether `text` says a name other than those in `known` (the speakers', the question's;
    a word that begins one of them is theirs, case aside: "Mel" is Melanie)."""
    known = [name for name in known if name]
    latin = [name.lower() for name in known if name.isascii()]
    for word in _CAPITALISED.findall(text):
        lowered = word.lower()
        if lowered not in _NOT_NAMES and not any(name.startswith(lowered) for name in latin):
            return True
    for match in _ZH_NAMED.finditer(text):
        said = match.group(0)
        if not any(said.endswith(common) for common in _ZH_COMMON) and not any(name in said for name in known if not name.isascii()):
            return True
    return False


def favour_names(hits: Sequence[Hit], query: str, weight: float) -> list[Hit]:
    """`hits` with those whose own words say a name (`says_name`, less the speakers' and those the
    query says) scored (1 + weight) times higher, best first again (ties by record id), when the
    query asks for a name."""
    if weight <= 0 or not asks_name(query):
        return list(hits)
    # the speakers' first names: the names a conversation is full of
    names = [*{speaker_of(hit).split(" ")[0] for hit in hits}, *_QUESTION_WORDS.findall(query)]
    return boosted(hits, lambda hit: says_name(_own_words(hit), names), weight, "says_name")


def _own_words(hit: Hit) -> str:
    """What a hit's record says itself: a turn's words without who said them, the turn before or
    the index's CJK tokens."""
    record = hit.record
    if isinstance(record, RowView):
        row = record.row
        if "summary" in row:
            return f"{row.get('summary') or ''} {row.get('details') or ''}"
        return (row.get("text") or "").split(MARK, 1)[0]
    if hasattr(record, "render_parts"):
        return record.render_parts()[1]
    return record.index_text()
