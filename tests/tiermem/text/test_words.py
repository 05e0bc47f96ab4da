"""Golden outputs of tiermem.text.words and its three readers (contract, signals, memory), computed with the code the
module replaced (three stop lists and tokenizers): any change here changes prompts, features or retrieval."""

import pytest

from serving import signals
from tiermem import contract
from tiermem.memory import text
from tiermem.text import words

SUMMARY = ["The dog painted a glass agency"]
GOLDEN = {
    # text: (memory normalize, memory content_words, signals content_words, contract missing_words vs SUMMARY)
    "How long ago did Mel\u2019s dogs visit the glass museums?": (
        "how long ago did mels dogs visit the glass museums",
        ["long", "ago", "mels", "dogs", "visit", "glass", "museums"],
        {"ago", "dog", "glass", "long", "mel", "museum", "visit"},
        ["ago", "mel", "visit", "museums"]),
    "I'll say: didn't Caroline's agencies paint?": (
        "ill say didnt carolines agencies paint", ["say", "carolines", "agencies", "paint"],
        {"agencie", "caroline", "paint", "say"}, ["ll", "say", "didn", "caroline"]),
    "Caf\u00e9 NA\u00cfVE r\u00e9sum\u00e9_x 2023-05-08!": (
        "caf\u00e9 na\u00efve r\u00e9sum\u00e9_x 2023 05 08",
        ["caf\u00e9", "na\u00efve", "r\u00e9sum\u00e9_x", "2023", "05", "08"],
        {"05", "08", "2023", "caf", "na", "r", "sum", "x"}, ["caf", "na", "ve", "r", "sum", "x", "2023", "05", "08"]),
    "Yes, only ALL the things ones": ("yes only all the things ones", [], {"yes"}, ["only", "all", "things", "ones"]),
    "hiking biking is ok": ("hiking biking is ok", ["hiking", "biking", "ok"], {"biking", "hiking", "ok"},
                            ["hiking", "biking", "ok"]),
}


@pytest.mark.parametrize("sample", list(GOLDEN))
def test_readers_keep_their_golden_outputs(sample):
    normalized, memory_words, signal_words, missing = GOLDEN[sample]
    assert text.normalize(sample) == words.normalize(sample) == normalized
    assert text.content_words(sample) == memory_words
    assert signals.content_words(sample) == signal_words
    assert contract.missing_words(sample, SUMMARY) == missing


def test_tokens_and_folds():
    assert words.tokens("Didn't Mel's 2 DOGS") == ["didn", "t", "mel", "s", "2", "dogs"]
    assert [words.stem(w) for w in ("agencies", "painted", "hiking", "boxes", "dogs", "glass", "bus", "is")] == [
        "agency", "paint", "hik", "box", "dog", "glas", "bus", "is"]
    assert [words.strip_plural(w) for w in ("dogs", "glass", "bus", "agencies", "is")] == [
        "dog", "glass", "bus", "agencie", "is"]


def test_stop_sets_are_the_base_plus_named_groups():
    assert len(words.FUNCTION_WORDS) == 78
    assert (len(words.FORM_WORDS), len(words.SIGNAL_STOPWORDS), len(words.MEMORY_STOPWORDS)) == (90, 127, 179)
    assert words.FUNCTION_WORDS == words.FORM_WORDS & words.SIGNAL_STOPWORDS & words.MEMORY_STOPWORDS
    assert "often" in words.FORM_WORDS - words.SIGNAL_STOPWORDS  # "how often" is form in the contract only
    assert "didn" in words.SIGNAL_STOPWORDS - words.MEMORY_STOPWORDS  # memory's normalize makes "didnt" instead
