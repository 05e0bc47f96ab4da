"""Whose fact it is: the persons a question names, resolved against the people a conversation knows (its `Cast`:
speakers and mentioned names), the cast winning over the spelling rules (docs/labeling.md)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()
_DAYS = ("monday tuesday wednesday thursday friday saturday sunday "
         "mon tue tues wed thu thur thurs fri sat sun").split()
_NOT_NAMES = frozenset(_MONTHS) | frozenset(_DAYS) | frozenset(
    "i i'm i've i'll i'd what when where which who whom whose why how did does do is are was were has have had "
    "would could should can will may might must shall if in on at the a an and or of for to with from by".split())

# Short forms that are not prefixes of the full name (prefixes are matched as such: 'Mel' = 'Melanie').
_NICKNAMES = {
    "robert": "bob bobby rob robbie bert", "william": "bill billy will willy liam", "richard": "dick rick rich",
    "elizabeth": "liz lizzie beth betty eliza libby", "margaret": "maggie meg peggy marge", "katherine":
    "kate katie kathy kat", "catherine": "kate katie cathy cat", "james": "jim jimmy jamie", "john": "jack johnny",
    "michael": "mike mikey mick", "thomas": "tom tommy", "joseph": "joe joey", "charles": "charlie chuck",
    "edward": "ed eddie ted ned", "henry": "hank harry", "anthony": "tony", "alexander": "alex sasha",
    "alexandra": "alex sasha lexi", "christopher": "chris kit", "christine": "chris tina", "daniel": "dan danny",
    "david": "dave davey", "jennifer": "jen jenny", "jessica": "jess jessie", "nicholas": "nick nicky",
    "patricia": "pat patty trish", "rebecca": "becky becca", "samuel": "sam sammy", "samantha": "sam sammy",
    "stephen": "steve", "steven": "steve", "susan": "sue susie", "theodore": "ted teddy theo", "victoria": "vicky",
    "andrew": "andy drew", "benjamin": "ben benny", "deborah": "deb debbie", "gregory": "greg", "jonathan": "jon",
    "lawrence": "larry", "matthew": "matt", "peter": "pete", "timothy": "tim timmy", "zachary": "zach zack",
    "abigail": "abby", "josephine": "jo josie", "eleanor": "ellie nell", "frances": "fran frankie",
    "francis": "frank", "isabella": "bella izzy", "isabel": "izzy bel", "gabriel": "gabe", "gabriela": "gabi",
    "jacob": "jake", "joshua": "josh", "kimberly": "kim", "madeline": "maddie", "natalie": "nat",
    "nathaniel": "nate nat", "olivia": "liv", "penelope": "penny", "raymond": "ray", "ronald": "ron ronnie",
    "sarah": "sally", "mohammed": "mo", "muhammad": "mo", "dorothy": "dot dottie", "evelyn": "evie",
}
_NICKS: dict[str, set[str]] = {}
for _full, _shorts in _NICKNAMES.items():
    for _short in _shorts.split():
        _NICKS.setdefault(_full, set()).add(_short)
        _NICKS.setdefault(_short, set()).add(_full)

_CAPITALIZED = re.compile(r"\b[A-Z][A-Za-z'\u2019\-]*")
_DETERMINERS = frozenset("the a an my your his her its our their this that these those every each no any some".split())
_UNSEGMENTED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # kana, CJK ideographs
_VOCATIVE = re.compile(r"\s*([^\W\d_][\w'\u2019\-]*)\s*,")  # 'Melanie, what did you paint?'

_WORD = re.compile(r"[^\W\d_][\w'\u2019\-]*")
_SECOND_PERSON = re.compile(r"\b(you|your|yours|yourself)\b", re.IGNORECASE)
_ROLES = frozenset({"assistant", "user", "bot", "ai", "system"})  # a chat with an assistant: it serves one person
_ROLE_SPEAKER = re.compile(r"^\s*(assistant|user|bot|ai|system)\s*:", re.IGNORECASE)


def fold(name: str) -> str:
    """A name as compared: case-folded, possessive and edge punctuation dropped ("Melanie's" -> 'melanie')."""
    key = name.casefold().replace("\u2019", "'").strip("'-.,:;!?")
    return key[:-2] if key.endswith("'s") else key.rstrip("'")


def _names(text: str) -> list[str]:
    """The capitalized words of `text` that may be names (not question words, months, days or acronyms)."""
    words = (fold(w) for w in _CAPITALIZED.findall(text) if not w.isupper() or len(w) == 1)
    return [w for w in words if len(w) > 1 and w not in _NOT_NAMES]


def _lower_names(text: str, names: set[str]) -> set[str]:
    """The words of `text` that are one of `names` as written in any case, unless a determiner makes the word a
    noun ('I paid the bill', 'my will') or it is a question word, month or day."""
    words = _WORD.findall(text)
    return {w for i, w in enumerate(map(fold, words)) if w in names and w not in _NOT_NAMES
            and (i == 0 or fold(words[i - 1]) not in _DETERMINERS)}


def _inside(text: str, names: Iterable[str]) -> set[str]:
    """The names of a script written without spaces (Chinese, Japanese) that appear anywhere in `text`."""
    return {fold(n) for n in names if _UNSEGMENTED.search(n) and fold(n) in text.casefold()}


@functools.lru_cache(maxsize=262144)  # every question's names are compared with every name the history mentions
def _collapse(name: str) -> str:
    return _DOUBLED.sub(r"\1", name)


_DOUBLED = re.compile(r"(.)\1+")


@functools.lru_cache(maxsize=262144)
def _folded(name: str) -> str:
    return fold(name)


def _distance(a: str, b: str) -> int:
    """Levenshtein distance (names are short)."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


@functools.lru_cache(maxsize=65536)
def same_person(a: str, b: str) -> bool:
    """Whether two written names can be one person: equal once folded, one a short form (prefix of 3+ letters or
    a nickname) of the other, or a spelling variant of a 5+ letter name (module docstring)."""
    a, b = _folded(a), _folded(b)
    if not a or not b:
        return False
    if a == b or b in _NICKS.get(a, ()):
        return True
    if min(len(a), len(b)) >= 3 and (a.startswith(b) or b.startswith(a)):
        return True
    if min(len(a), len(b)) < 5:
        return False
    limit = 2 if min(len(a), len(b)) >= 8 else 1
    ca, cb = _collapse(a), _collapse(b)
    return abs(len(ca) - len(cb)) <= limit and _distance(ca, cb) <= limit  # the length gap bounds the distance


@dataclass(frozen=True)
class Cast:
    """The people a conversation knows: its turns' speakers (data) and the names they mention (`_text_names`)."""

    speakers: tuple[str, ...]
    mentioned: tuple[str, ...]
    # what every question's guard reads of the cast, computed once (a long history mentions thousands of names)
    _guards: dict[str, PersonGuard] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _resolved: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def of_turns(cls, turns: Iterable[object]) -> Cast:
        speakers: dict[str, None] = {}
        mentioned: dict[str, None] = {}
        for turn in turns:
            speaker = str(getattr(turn, "speaker", "") or "").strip()
            if speaker:
                speakers[speaker] = None
            mentioned.update(dict.fromkeys(_text_names(str(getattr(turn, "text", "") or ""))))
        folded = {fold(s) for s in speakers}
        return cls(tuple(speakers), tuple(m for m in mentioned if m not in folded))

    @functools.cached_property
    def folded_speakers(self) -> frozenset[str]:
        return frozenset(fold(s) for s in self.speakers)

    @functools.cached_property
    def folded_known(self) -> frozenset[str]:
        return self.folded_speakers | {fold(m) for m in self.mentioned}

    def resolve(self, name: str) -> tuple[str, ...]:
        """The known names `name` can be (speakers first); empty when it matches none. A name that is exactly a
        speaker's takes in no other speaker by the spelling rules (Dan and Danielle both speaking: Dan is Dan)."""
        if name in self._resolved:  # a name every question of a long history asks about is read against it once
            return self._resolved[name]
        found = tuple(k for k in (*self.speakers, *self.mentioned) if same_person(name, k))
        if any(fold(k) == fold(name) for k in self.speakers):
            found = tuple(k for k in found if fold(k) == fold(name) or k not in self.speakers)
        self._resolved[name] = found
        return found


@functools.lru_cache(maxsize=65536)  # a turn's text is read again by every question asked after it
def _text_names(text: str) -> tuple[str, ...]:
    """The names a turn's text mentions: capitalized words not opening a sentence."""
    found: dict[str, None] = {}
    for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
        first = _WORD.search(sentence)
        found.update(dict.fromkeys(_names(sentence[first.end():] if first else sentence)))
    return tuple(found)


def question_persons(question: str, cast: Cast | None = None) -> tuple[str, ...]:
    """The folded names a question asks about: its capitalized words past the first that are no question word, month
    or day ('When did Melanie paint?' -> melanie), and any word that is a speaker's ('what did elise play?')."""
    first = re.match(r"\s*[A-Za-z][\w'-]*", question)
    found = _names(question[first.end():] if first else question)
    if cast is not None:
        speakers, known = cast.folded_speakers, cast.folded_known
        vocative = _VOCATIVE.match(question)
        if vocative and fold(vocative.group(1)) in known:  # 'Melanie, what did you paint?': asked of Melanie
            found.insert(0, fold(vocative.group(1)))
        # a capitalized word a speaker bears is a person, months and modal verbs included ('What did May buy?')
        found += [w for w in map(fold, _CAPITALIZED.findall(question[first.end():] if first else question))
                  if w in speakers]
        found += sorted(_lower_names(question, speakers)) + sorted(_inside(question, cast.speakers))
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class PersonGuard:
    """Which units can state the answer to a question that names persons: those about a resolved person."""

    persons: tuple[str, ...]  # the question's names (folded)
    known: tuple[tuple[str, tuple[str, ...]], ...]  # each resolved name with the known names it matched
    unmatched: tuple[str, ...]  # names no speaker or mentioned name matches: they do not narrow the units
    others: tuple[str, ...] = ()  # the other speakers (folded): a unit naming one exactly is not about a near name

    @property
    def narrows(self) -> bool:
        return bool(self.known)

    @property
    def reason(self) -> str | None:
        """What the guard did, for the label record (None when the question names no person)."""
        if not self.persons:
            return None
        parts = [f"{name} = {', '.join(matches)}" for name, matches in self.known]
        if self.unmatched:
            parts.append(f"{', '.join(self.unmatched)}: no speaker or mentioned name matches, does not narrow")
        head = "units about " if self.known else "every unit counts: "
        return head + "; ".join(parts)

    def about(self, text: str, speakers: Sequence[str] | None = None) -> bool:
        """Whether a unit is about a resolved person: a speaker of it (data) is them, its text names them (in any
        case), or it speaks to them ('Ana: did you...?'; between two, 'you' is the other). An assistant's or user's
        unit is about the person it serves. `speakers=None`: the text's 'Name:' opening counts."""
        if not self.narrows:
            return True
        if _SECOND_PERSON.search(text) or _ROLE_SPEAKER.match(text) or any(
                fold(s) in _ROLES for s in speakers or ()):
            return True
        targets = {fold(m) for name, matches in self.known for m in (name, *matches)}
        said = set(_names(text)) | {fold(s) for s in speakers or ()}
        said |= {w for w in map(fold, _CAPITALIZED.findall(text)) if w in targets}  # 'May: ...', 'I met June'
        said |= _lower_names(text, targets) | _inside(text, targets)
        return any(w in targets or w not in self.others and same_person(w, t) for w in said for t in targets)


def person_guard(question: str | None, cast: Cast | None = None) -> PersonGuard:
    """The guard for `question`; without a cast (no known conversation) every name the question gives narrows."""
    if cast is not None and question in cast._guards:
        return cast._guards[question]
    persons = question_persons(question, cast) if question else ()
    if cast is None:
        return PersonGuard(persons, tuple((p, ()) for p in persons), ())
    resolved = [(p, cast.resolve(p)) for p in persons]
    known = tuple((p, m) for p, m in resolved if m)
    targets = {fold(x) for p, m in known for x in (p, *m)}
    others = tuple(dict.fromkeys(fold(s) for s in cast.speakers if fold(s) not in targets))
    guard = PersonGuard(persons, known, tuple(p for p, m in resolved if not m), others)
    if question is not None:
        cast._guards[question] = guard
    return guard
