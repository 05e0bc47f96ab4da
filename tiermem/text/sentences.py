"""Sentences of a text as character spans: what the reader reads one at a time (SQuAD paragraphs in its
pre-training, what `ask` read in the extractive answerer)."""

from __future__ import annotations

import re

# a sentence ends at . ! ? (optionally closed by a quote or bracket) followed by white space and a capital,
# digit or opening quote: the usual Wikipedia sentence; abbreviations like "U.S. Army" stay joined often enough
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the text's sentences, covering it without the white space between them."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if text[start: m.start()].strip():
            spans.append((start, m.start()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text.rstrip())))
    return spans
