"""Content words: how text is split into words, folded, and which words are stop words, for the contract
(`FORM_WORDS`), the signals (`SIGNAL_STOPWORDS`) and the memory (`MEMORY_STOPWORDS`); each set is pinned elsewhere."""

from __future__ import annotations

import re
import unicodedata

# ---- tokenizers ----------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """The lower-cased ASCII letter/digit runs of `text`, in order (contract and signals)."""
    return _WORD.findall(text.lower())


_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


def normalize(text: str) -> str:
    """Casefolded, punctuation-free, single-spaced: the form the memory compares quotes and raw text in."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    text = re.sub(r"'", "", text)  # "don't" == "dont"
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


# ---- folds ---------------------------------------------------------------------------------------


def stem(word: str) -> str:
    """A crude, dependency-free plural/tense fold, enough to match 'agencies'~'agency', 'painted'~'paint'."""
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    return word


def strip_plural(word: str) -> str:
    """A lighter fold than `stem` (the signals' features were fitted with it): 'dogs' -> 'dog', 'glass' stays."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


# ---- stop words ----------------------------------------------------------------------------------

# Articles, conjunctions, prepositions, auxiliaries, pronouns and wh-words: a stop word for every reader.
FUNCTION_WORDS = frozenset("""a an the and or but of to in on at for with by from as about into over after before
    is are was were be been being am do does did have has had will would could should can what when where which who
    whom why how many much also there here this that these those i me my you your he him his she her it its we our
    they them their s t not no""".split())

# More auxiliaries and question words: questions are full of them (contract and signals read questions).
QUESTION_AUXILIARIES = frozenset("done may might must shall whose ever us".split())

# Quantifiers, connectives and contraction tails ("I'll" -> ll): the signals and the memory drop them; the contract's
# list never had them, so they count as question words in its prompt.
QUANTIFIERS_AND_CONNECTIVES = frozenset("""if between during than then doing having all any some only own same so
    too very just ll re ve d m one ones thing things""".split())

# The contract only: the rest of "how long", "how often", "yet", and "yes" of yes/no questions.
CONTRACT_FORM_EXTRA = frozenset("long often yet yes".split())

# The signals only: what `tokens` leaves of a negated contraction ("didn't" -> didn, t) and stray letters.
SIGNAL_EXTRA = frozenset("mine don doesn didn isn wasn weren aren hasn haven hadn won wouldn o y".split())

# The memory only: the rest of a classic English stop list, the apostrophe-free contractions `normalize` makes
# ("I'm" -> im), and chat filler and light verbs that state no fact ("yeah", "thanks", "got", "like").
MEMORY_EXTRA = frozenset("""above again against because below both down each few further hers herself himself
    itself let more most myself nor now off once other ours ourselves out such theirs themselves through under
    until up while yours yourself yourselves im ive ill id youre youve thats dont didnt doesnt isnt wasnt cant
    wont really yeah yes oh hey hi wow thanks thank lot got get gets getting go going went gone like know think
    something way well""".split())

FORM_WORDS = FUNCTION_WORDS | QUESTION_AUXILIARIES | CONTRACT_FORM_EXTRA
SIGNAL_STOPWORDS = FUNCTION_WORDS | QUESTION_AUXILIARIES | QUANTIFIERS_AND_CONNECTIVES | SIGNAL_EXTRA
MEMORY_STOPWORDS = FUNCTION_WORDS | QUANTIFIERS_AND_CONNECTIVES | MEMORY_EXTRA


# ---- what a memory fact is made of -----------------------------------------------------------------

TOPIC_TAG = re.compile(r"\u3010[^\u3011]*\u3011")  # a memory system's topic label ("【Travel Planning】"), not a fact


def fact_words(text: str, letters: bool = False) -> list[str]:
    """The stemmed content words of a fact, a turn or a reply (no topic tag): the RealMem loader's and the reply
    rule's measure (`letters=True`: single letters kept, as the loader's placements were measured)."""
    words = normalize(TOPIC_TAG.sub(" ", text)).split()
    return [stem(w) for w in words if w not in MEMORY_STOPWORDS and (letters or len(w) > 1 or w.isdigit())]
