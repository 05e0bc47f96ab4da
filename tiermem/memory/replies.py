"""The research steps' replies read back: the facts an integrate step found, the searches a plan step asks for,
through the one linear, length-bounded reader of JSON in LLM replies (tiermem.text.json_text)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tiermem.memory.text import normalize
from tiermem.text.json_text import bounded_reply, json_values


@dataclass
class Fact:
    fact: str
    quote: str


@dataclass
class Search:
    kind: str  # "summary" | "keyword"
    query: str


def _json_candidates(text: str) -> list[Any]:
    """The reply's first JSON value (code fences dropped), as a list of at most one."""
    first = next(json_values(re.sub(r"```(?:json)?", "", bounded_reply(text))), None)
    return [] if first is None else [first[0]]


def _facts_of(items: list[Any]) -> list[Fact]:
    facts = []
    for item in items:
        if isinstance(item, str) and item.strip():
            facts.append(Fact(item.strip(), ""))
        elif isinstance(item, dict) and isinstance(item.get("fact"), str) and item["fact"].strip():
            quote = item.get("quote")
            facts.append(Fact(item["fact"].strip(), quote.strip() if isinstance(quote, str) else ""))
    return facts


def _complete_fact_objects(text: str) -> list[dict[str, Any]]:
    """The whole `{"fact": ..}` objects inside a reply cut off by max_tokens (a constrained reply is valid JSON
    up to the cut, so every object closed before it is whole)."""
    return [obj for obj, _, _ in json_values(text, "{", start=1) if isinstance(obj, dict) and "fact" in obj]


def parse_facts_reply(text: str) -> list[Fact] | None:
    """`{"facts": [{"fact", "quote"}]}` (or a bare list); None when unparseable. A reply cut by max_tokens (not the
    model giving up on the format) keeps its whole fact objects; with none it is unparseable."""
    text = bounded_reply(text)
    if len(text) < 40 and normalize(text) in ("none", "no facts", "nothing"):  # only a short reply can be one
        return []
    for obj in _json_candidates(text):
        items = obj.get("facts") if isinstance(obj, dict) else obj
        if isinstance(items, list):
            return _facts_of(items)
        break  # the first JSON value is not the reply: a cut-off reply's inner object, or no reply at all
    if re.match(r'^\s*(?:```(?:json)?\s*)?\{\s*"facts"\s*:\s*\[', text):
        return _facts_of(_complete_fact_objects(text)) or None
    return None


_KINDS = {"summary": "summary", "summaries": "summary", "semantic": "summary", "dense": "summary",
          "keyword": "keyword", "keywords": "keyword", "bm25": "keyword", "raw": "keyword"}


def parse_plan_reply(text: str) -> list[Search] | None:
    """[] means DONE; None when unparseable."""
    text = bounded_reply(text)
    if re.match(r"^\W*done\b", text.strip(), flags=re.IGNORECASE):
        return []
    for obj in _json_candidates(text):
        if isinstance(obj, dict) and obj.get("done") is True:
            return []
        items = obj.get("searches") if isinstance(obj, dict) else obj
        if not isinstance(items, list):
            return None
        searches = []
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("query"), str) and item["query"].strip():
                kind = _KINDS.get(str(item.get("type", item.get("kind", "keyword"))).lower(), "keyword")
                searches.append(Search(kind, item["query"].strip()))
        return searches
    return None
