"""Deterministic entity extraction for raw mode (no model): what is reliably visible in text.

Pure functions, no I/O. From a turn it takes
- the speaker (a person);
- quoted titles ("Charlotte's Web", “Nothing is Impossible”, 《三体》, 「千与千寻」);
- proper names: runs of capitalised words inside a sentence ("Sweden", "New York", "Melanie's"),
  and a sentence's first word only when that name is known (seen inside a sentence, or an
  entity already in the graph);
- dates named by month ("May 2023", "8 May 2023", "2023年5月");
- any known entity name or alias in the text, in any script (how Chinese text links: names
  are matched against the graph's dictionary, as no word boundaries are visible).

Precision matters more than recall here: a wrong link pulls unrelated records into a search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memos.memtypes.entity import normal_name

__all__ = ["Mention", "extract_mentions", "find_known", "normal_text", "query_names"]


@dataclass(frozen=True, slots=True)
class Mention:
    """A name found in text, with a guess at its kind."""

    name: str
    kind: str

    @property
    def key(self) -> str:
        return normal_name(self.name)


_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
# Capitalised words that are not names (sentence starters, pronouns, greetings, interjections).
_NOT_NAMES = frozenset((
    "i i'm i've i'd i'll me my mine we our us you your yours he his him she her hers they their them it its "
    "a an the this that these those there here then than so and but or nor yet if because as at by for from in into "
    "of on onto to with without about after before during since until while when where which who whom whose what why how "
    "yes yeah yep yup no nope not oh ah wow hey hi hello hmm ok okay sure thanks thank please sorry cool nice great "
    "awesome amazing good well also just really very totally absolutely definitely honestly actually anyway "
    "all any some each every both either neither none one two three next other another "
    "do does did doing done have has had having be is am are was were been being can could will would shall should "
    "may might must let let's lets go going went get got make made take took see saw look looking love loved like "
    "haha lol omg btw bye congrats congratulations glad happy hope wishing good-bye goodbye cheers dear "
    "mom dad mum mother father grandma grandpa sis bro buddy guys everyone everybody someone somebody anyone "
    "today tomorrow yesterday tonight morning evening night week weekend month year time "
    "that's it's what's there's here's who's how's can't don't won't didn't isn't wasn't aren't couldn't wouldn't "
    "mr mrs ms dr st").split()) | frozenset(_DAYS)

_WEAK = frozenset("new old first last north south east west big little great".split())  # names only with another word
_CAP = r"[A-Z][\w'’\-]*"
_CONNECT = r"(?:of|the|de|la|van|von)"
_NAME_RUN = re.compile(rf"(?<![\w'’])({_CAP}(?:\s+(?:{_CONNECT}\s+)?{_CAP})*)")
_QUOTED = re.compile(r"[\"“]([^\"“”\n]{2,80})[\"”]|《([^》\n]{1,60})》|「([^」\n]{1,60})」|『([^』\n]{1,60})』")
_DATE = re.compile(
    r"\b(?:(\d{1,2})\s+)?(" + "|".join(m for m in _MONTHS if len(m) > 3 or m == "may") + r")\.?,?\s+(\d{4})\b"
    r"|(\d{4})\s*年\s*(\d{1,2})\s*月", re.IGNORECASE)
_SENTENCE_START = re.compile(r"(?:^|[.!?…]\s+|[\n\"“(]\s*|[:;]\s+|[-—]\s+)$")
_POSSESSIVE = re.compile(r"['’]s$")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _clean(name: str) -> str:
    name = _POSSESSIVE.sub("", name.strip(" -'’"))
    return name.strip()


def _is_name(run: str) -> bool:
    words = [w for w in re.split(r"\s+", run) if w]
    key = _POSSESSIVE.sub("", words[0].casefold())
    if len(words) == 1 and (key in _NOT_NAMES or key in _MONTHS or key in _WEAK or len(key) < 2):
        return False
    return any(_POSSESSIVE.sub("", w.casefold()) not in _NOT_NAMES for w in words)


def _trim(run: str) -> str:
    """Drop leading non-name words ("Hey Melanie" -> "Melanie", "The Beatles" keeps "The")."""
    words = run.split()
    while len(words) > 1 and words[0].casefold() in _NOT_NAMES and words[0] != "The":
        words = words[1:]
    while len(words) > 1 and _POSSESSIVE.sub("", words[-1].casefold()) in _NOT_NAMES:
        words = words[:-1]
    return " ".join(words)


def extract_mentions(text: str, speaker: str = "", known: Iterable[str] = ()) -> list[Mention]:
    """The entities a turn mentions (speaker first), each once, in order of appearance.

    `known`: normalised names already in the graph (a sentence-initial capitalised word links
    only if it is one of them, and any of them found in the text links in any script)."""
    found: dict[str, Mention] = {}

    def add(name: str, kind: str) -> None:
        name = _clean(name)
        key = normal_name(name)
        if key and key not in found and len(key) <= 80:
            found[key] = Mention(name, kind)

    if speaker.strip():
        add(speaker, "person")
    quoted_spans = []
    for match in _QUOTED.finditer(text):
        title = next(g for g in match.groups() if g is not None).strip()
        words = title.split()
        latin_title = words and words[0][:1].isupper() and len(words) <= 8
        if latin_title or _HAN.search(title[:1] or "") or match.group(0)[0] in "《「『":
            add(title, "title")
            quoted_spans.append(match.span())
    for match in _DATE.finditer(text):
        if match.group(2):
            month = match.group(2).capitalize()
            add(f"{month} {match.group(3)}", "date")
        else:
            add(f"{match.group(4)}-{int(match.group(5)):02d}", "date")
    known_set = set(known)
    for match in _NAME_RUN.finditer(text):
        if any(a <= match.start() < b for a, b in quoted_spans):
            continue
        run = _trim(match.group(1))
        if not _is_name(run):
            continue
        start = match.start() + match.group(1).find(run.split()[0])
        initial = bool(_SENTENCE_START.search(text[:start])) and run == match.group(1)
        if initial and normal_name(_clean(run)) not in known_set and " " not in run:
            continue  # "Painting is fun." -- a capital only because a sentence starts there
        add(run, "name")
    if known_set:
        for key in find_known(text, known_set):
            if key not in found:
                found[key] = Mention(key, "name")
    return list(found.values())


def find_known(text: str, known: Iterable[str]) -> list[str]:
    """The known (normalised) names that occur in `text`: on word boundaries for Latin names,
    anywhere for names in Han characters."""
    folded = " " + normal_text(text) + " "
    out = []
    for key in known:
        probe = normal_text(key)
        if not probe:
            continue
        if _HAN.search(probe):
            if probe in folded:
                out.append(key)
        elif f" {probe} " in folded:
            out.append(key)
    return out


_PUNCT = re.compile(r"[^\w\u3400-\u9fff]+", re.UNICODE)


def normal_text(text: str) -> str:
    """Text as `find_known` compares it: case-folded, possessives dropped, punctuation as spaces."""
    text = re.sub(r"['’]s\b", "", text.replace("\u2019", "'"))
    return " ".join(_PUNCT.sub(" ", text.casefold()).split())


def query_names(query: str, known: Iterable[str]) -> list[str]:
    """The known names a query mentions (normalised): any of them in the text, plus the query's
    own names that match one."""
    known_set = set(known)
    keys = set(find_known(query, known_set))
    for mention in extract_mentions(query, known=known_set):
        if mention.key in known_set:
            keys.add(mention.key)
    return sorted(keys)
