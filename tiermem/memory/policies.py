"""The two answer paths: summary-only (tier 1) and bounded multi-hop research over raw pages (tier 2). `wall_s` counts
recorded LLM latencies, so a cached rerun costs what the original did; an LLMError ends a path with `answer=None`."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from typing import Any

from tiermem.data.conversations import Question
from tiermem.data.dates import parse_timestamp
from tiermem.llm import LLM, LLMError
from tiermem.memory.raw_store import Page
from tiermem.memory.replies import Search, parse_facts_reply, parse_plan_reply
from tiermem.memory.summaries import RetrievedUnit, day_of
from tiermem.memory.text import content_words, link_quote, normalize
from tiermem.memory.tiers import TwoTierMemory
from tiermem.memory.turns import TURN_CANDIDATES, pages_by_turns, rescore
from tiermem.text.answer_match import find_dates

ANSWER_SYSTEM = (
    "You answer questions about a long conversation between people, using only the notes given. "
    "Reply with the answer alone, as briefly as possible: a name, a date, a number or a short phrase. "
    "Write dates as absolute dates such as '7 May 2023'. If the notes do not say, reply 'not mentioned'."
)
INTEGRATE_SYSTEM = (
    "You collect evidence for a question from raw conversation pages. Reply with JSON only: "
    '{"facts": [{"fact": "<one standalone fact, full names, absolute dates>", "quote": "<the exact words from the '
    'page that support it>"}]}. Copy each quote word for word from the pages. Include only facts that help answer '
    'the question; reply {"facts": []} if there are none.'
)
PLAN_SYSTEM = (
    "You plan searches in a conversation memory to answer a question. Reply with JSON only. If the facts found so "
    'far answer the question completely, reply {"searches": []}. Otherwise reply '
    '{"searches": [{"type": "summary" or "keyword", "query": "<search text>"}]} with at most 3 searches. '
    "'summary' searches short notes by meaning; 'keyword' searches the raw conversation by words."
)

# The replies' JSON Schemas, sent with each step call (docs/DESIGN.md, "Research steps the small model can keep").
# The bounds keep a constrained reply inside step_max_tokens (384): a small model held to valid JSON otherwise fills
# every string to the token limit; each held token also costs the enforcer's step (~0.1 s on 2 CPU cores).
_TEXT = {"type": "string", "maxLength": 100}  # a sentence; 2 facts of 2 such strings stay under ~150 tokens
INTEGRATE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["facts"],
    "properties": {"facts": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "additionalProperties": False, "required": ["fact", "quote"],
        "properties": {"fact": _TEXT, "quote": _TEXT}}}},
}
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["searches"],
    "properties": {"searches": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "additionalProperties": False, "required": ["type", "query"],
        "properties": {"type": {"type": "string", "enum": ["summary", "keyword"]},
                       "query": {"type": "string", "maxLength": 80}}}}},
}


@dataclass
class PathCost:
    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    wall_s: float = 0.0
    pages_read: int = 0
    rounds: int = 0
    cached_calls: int = 0  # of llm_calls, those answered from the response cache (priced at their original cost)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __add__(self, other: PathCost) -> PathCost:
        return PathCost(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values(), strict=True)))


class _Meter:
    """Counts tokens and calls; wall time = elapsed outside LLM calls + the calls' recorded latencies."""

    def __init__(self) -> None:
        self.cost = PathCost()
        self._start = time.perf_counter()
        self._in_llm = 0.0
        self._recorded = 0.0

    def chat(self, llm: LLM, messages: list[dict[str, str]], max_tokens: int,
             json_schema: dict[str, Any] | None = None) -> str:
        start = time.perf_counter()
        try:
            res = llm.chat(messages, max_tokens=max_tokens, temperature=0.0, json_schema=json_schema)
        finally:
            self._in_llm += time.perf_counter() - start
        self._recorded += res.latency_s
        self.cost.llm_calls += 1
        self.cost.cached_calls += int(res.cached)
        self.cost.input_tokens += res.input_tokens
        self.cost.output_tokens += res.output_tokens
        return res.text

    def finish(self) -> PathCost:
        self.cost.wall_s = round(time.perf_counter() - self._start - self._in_llm + self._recorded, 6)
        return self.cost


def question_text(question: str | Question) -> tuple[str, str | None]:
    if isinstance(question, Question):
        return question.question, question.date
    return question, None


def clean_answer(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]  # an LLM reply, not records
    first = lines[0] if lines else ""
    return re.sub(r"^(final\s+)?answer\s*:\s*", "", first, flags=re.IGNORECASE).strip()


def _ask(q: str, date: str | None) -> str:
    return f"Question (asked on {date}): {q}" if date else f"Question: {q}"


def summary_messages(q: str, retrieved: Sequence[RetrievedUnit], date: str | None = None) -> list[dict[str, str]]:
    notes = "\n".join(f"[{i}] ({u.date or 'undated'}) {u.text}" for i, u in enumerate(retrieved, 1)) or "(none)"
    return [{"role": "system", "content": ANSWER_SYSTEM},
            {"role": "user", "content": f"Notes (best match first):\n{notes}\n\n{_ask(q, date)}\nAnswer:"}]


@dataclass
class SummaryResult:
    answer: str | None
    retrieved: list[RetrievedUnit]
    cost: PathCost
    error: str | None = None


def summary_policy(
    memory: TwoTierMemory, question: str | Question, llm: LLM, k: int = 5, *,
    retrieved: list[RetrievedUnit] | None = None, max_tokens: int = 48,
) -> SummaryResult:
    """Answer from the top-k summary units alone; `retrieved` reuses a retrieval already done (the router's)."""
    meter = _Meter()
    q, date = question_text(question)
    retrieved = memory.search_summaries(q, k) if retrieved is None else list(retrieved)
    answer, error = None, None
    try:
        answer = clean_answer(meter.chat(llm, summary_messages(q, retrieved, date), max_tokens))
    except LLMError as exc:
        error = f"LLMError: {exc}"
    return SummaryResult(answer, retrieved, meter.finish(), error)


# ---------------------------------------------------------------------------------------------- research


@dataclass
class LinkedQuote:
    fact: str
    quote: str
    page_id: str | None  # None: the quote matched no raw turn (kept for audit, not used as evidence)
    turn_id: str | None
    method: str | None  # "exact" | "overlap" | None
    round: int


@dataclass
class ResearchResult:
    answer: str | None
    pages_read: list[str]
    rounds: int
    quotes: list[LinkedQuote]
    cost: PathCost
    parse_failures: int
    error: str | None = None
    stop_reason: str = ""  # done | no_new_pages | max_rounds | integrate_unparseable | plan_unparseable | llm_error
    searches: list[Search] = field(default_factory=list)

    @property
    def linked(self) -> list[LinkedQuote]:
        return [q for q in self.quotes if q.page_id is not None]


def _facts_block(quotes: Sequence[LinkedQuote]) -> str:
    return "\n".join(f"- {q.fact}" for q in quotes) or "(none yet)"


def integrate_messages(q: str, date: str | None, quotes: Sequence[LinkedQuote],
                       pages: Sequence[Page]) -> list[dict[str, str]]:
    new = "\n\n".join(f"=== page {p.page_id} ===\n{p.text}" for p in pages)
    user = f"{_ask(q, date)}\n\nFacts found so far:\n{_facts_block(quotes)}\n\nNew pages:\n{new}"
    return [{"role": "system", "content": INTEGRATE_SYSTEM}, {"role": "user", "content": user}]


def plan_messages(q: str, date: str | None, quotes: Sequence[LinkedQuote],
                  searches: Sequence[Search]) -> list[dict[str, str]]:
    done = "\n".join(f"- {s.kind}: {s.query}" for s in searches) or "(none)"
    user = f"{_ask(q, date)}\n\nFacts found so far:\n{_facts_block(quotes)}\n\nSearches already run:\n{done}"
    return [{"role": "system", "content": PLAN_SYSTEM}, {"role": "user", "content": user}]


def select_snippets(q: str, pages: Sequence[Page], quotes: Sequence[LinkedQuote], limit: int) -> list[str]:
    """Turns the quotes linked to, then the read turns sharing most words with the question; in dialogue order."""
    turns = [(pi, ti, t) for pi, p in enumerate(pages) for ti, t in enumerate(p.turns)]
    linked = {qt.turn_id for qt in quotes if qt.turn_id}
    chosen = [(pi, ti) for pi, ti, t in turns if t.turn_id in linked][:limit]
    words = set(content_words(q))
    ranked = sorted(
        ((-len(words & set(content_words(f"{t.speaker} {t.text}"))), pi, ti) for pi, ti, t in turns
         if t.turn_id not in linked),
    )
    chosen += [(pi, ti) for hits, pi, ti in ranked if hits < 0][: max(0, limit - len(chosen))]
    return [
        f"({day_of(t.timestamp) or 'undated'}) {t.speaker}: {t.text}"
        for pi, ti in sorted(chosen) for t in [pages[pi].turns[ti]]
    ]


def research_messages(q: str, date: str | None, quotes: Sequence[LinkedQuote],
                      snippets: Sequence[str]) -> list[dict[str, str]]:
    facts = "\n".join(f'- {qt.fact} (evidence: "{qt.quote}")' for qt in quotes) or "(none)"
    raw = "\n".join(snippets) or "(none)"
    user = f"Facts found:\n{facts}\n\nConversation excerpts:\n{raw}\n\n{_ask(q, date)}\nAnswer:"
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]


def time_pages(memory: TwoTierMemory, q: str, question_date: str | None = None) -> list[str]:
    """The pages dated in the time a question names ('on 16.01.2024', 'last week'), best BM25 match first. A year-less
    day or month is read in the question's year, or without one in every year the conversation covers."""
    asked = parse_timestamp(question_date) if question_date else None
    mentions = [m.when for m in find_dates(q, asked.date() if asked else None)]
    if not mentions:
        return []
    years = sorted({m.year for p in memory.all_pages() for t in p.turns
                    for m in [parse_timestamp(t.timestamp)] if m is not None})
    spans = [s for w in mentions for s in ([w] if w.lo is not None else [w.in_year(y) for y in years])]
    found = list(dict.fromkeys(pid for s in spans if s.lo is not None for pid in memory.pages_between(s.lo, s.hi)))
    rank = {pid: i for i, pid in enumerate(memory.search_pages(q, len(found) * 4 + 8))}
    return sorted(found, key=lambda pid: rank.get(pid, len(rank)))


PROVENANCE_RANKS = 20  # imported Tier 1: the summary ranks whose source pages research reads first


def _interleave(*orders: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(pid for group in zip_longest(*orders) for pid in group if pid is not None))


def first_round_pages(memory: TwoTierMemory, q: str, retrieved: Sequence[RetrievedUnit], *,
                      pages_per_round: int = 2, keyword_k: int = 3, question_date: str | None = None,
                      reader: Any = None, turn_k: int = TURN_CANDIDATES, needed: int | None = None) -> list[str]:
    """Research's first-round pages (no LLM): summaries' provenance, BM25 pages and the best turns' pages interleaved;
    a `reader` puts its best turns' pages first, a named time its pages every other slot (words cannot find
    "16.01.2024"). `needed`: pages the caller reads; provenance filling them, turns go unranked (unembedded)."""
    linked = list(dict.fromkeys(pid for u in retrieved for pid in u.page_ids))
    keyword = memory.search_pages(q, keyword_k)
    provenance = None
    if memory.tier1 == "imported":
        # a memory system's facts each name their source turn: follow those links first, the retrieved units' and
        # then the next ranks' (its own search, one query vector), before raw-text search
        deeper = memory.search_summaries_fused(q, PROVENANCE_RANKS)
        provenance = list(dict.fromkeys([*linked, *(pid for u in deeper for pid in u.page_ids)]))
    filled = (provenance is not None and reader is None and needed is not None and needed <= pages_per_round
              and len(provenance) >= needed)
    hits = [] if filled else memory.search_turns(q, turn_k)
    order = _interleave(linked, keyword, pages_by_turns(hits))
    if provenance is not None:
        order = list(dict.fromkeys([*provenance[:pages_per_round], *order]))
    if reader is not None and hits:
        best = list(dict.fromkeys(h.page_id for h in rescore(hits, q, reader)))
        order = list(dict.fromkeys(best[:pages_per_round] + order))
    timed = time_pages(memory, q, question_date)
    return _interleave(timed, order) if timed else order


def estimated_research_input_tokens(q: str, date: str | None, pages: Sequence[Page], count_tokens: Any,
                                    max_snippets: int = 8) -> int:
    """Input tokens a one-round research path would send over `pages`, no model called: generator-free labels' cost."""
    integrate = integrate_messages(q, date, [], pages)
    answer = research_messages(q, date, [], select_snippets(q, pages, [], max_snippets))
    return sum(count_tokens(m["content"]) for m in integrate + answer)


def research_policy(
    memory: TwoTierMemory, question: str | Question, llm: LLM, retrieved: Sequence[RetrievedUnit],
    max_rounds: int = 3, *, pages_per_round: int = 2, keyword_k: int = 3, search_k: int = 3,
    max_searches: int = 3, max_snippets: int = 8, step_max_tokens: int = 384, answer_max_tokens: int = 48,
    turn_k: int = TURN_CANDIDATES,
) -> ResearchResult:
    """Escalation: up to `max_rounds` rounds of integrate (facts + quotes) and plan (DONE or searches), then answer.
    Stops on DONE, a round with no unread page, or an unparseable reply (`parse_failures`; what was found is used)."""
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    meter = _Meter()
    q, date = question_text(question)
    queue: list[str] = []
    read: list[str] = []

    def enqueue(page_ids: Sequence[str]) -> None:
        for pid in page_ids:
            if pid not in read and pid not in queue:
                queue.append(pid)

    enqueue(first_round_pages(memory, q, retrieved, pages_per_round=pages_per_round, keyword_k=keyword_k,
                              question_date=date, turn_k=turn_k))
    asked = {("keyword", normalize(q)), ("summary", normalize(q))}  # both already ran for the question
    searches: list[Search] = []
    quotes: list[LinkedQuote] = []
    parse_failures, rounds, stop, error, answer = 0, 0, "max_rounds", None, None
    try:
        for rnd in range(1, max_rounds + 1):
            batch, queue[:] = queue[:pages_per_round], queue[pages_per_round:]
            if not batch:
                stop = "no_new_pages"
                break
            rounds = rnd
            read.extend(batch)
            new_pages = memory.raw.get_many(batch)
            facts = parse_facts_reply(meter.chat(llm, integrate_messages(q, date, quotes, new_pages), step_max_tokens,
                                                 INTEGRATE_SCHEMA))
            if facts is None:
                stop = "integrate_unparseable"
                break
            search_space = new_pages + memory.raw.get_many(read[: -len(batch)])
            known = {normalize(x.fact): i for i, x in enumerate(quotes)}
            for fact in facts:
                i = known.get(normalize(fact.fact))
                if i is not None and quotes[i].page_id is not None:
                    continue  # already found and linked
                link = link_quote(fact.quote, search_space, fact.fact)
                entry = LinkedQuote(fact.fact, fact.quote, link and link.page_id, link and link.turn_id,
                                    link and link.method, rnd)
                if i is None:
                    known[normalize(fact.fact)] = len(quotes)
                    quotes.append(entry)
                elif link is not None:
                    quotes[i] = entry  # a fact unlinked so far now links to a page read this round
            if rnd == max_rounds:
                break
            plan = parse_plan_reply(meter.chat(llm, plan_messages(q, date, quotes, searches), step_max_tokens,
                                               PLAN_SCHEMA))
            if plan is None:
                stop = "plan_unparseable"
                break
            if not plan:
                stop = "done"
                break
            for search in plan[:max_searches]:
                key = (search.kind, normalize(search.query))
                if key in asked:
                    continue
                asked.add(key)
                searches.append(search)
                if search.kind == "summary":
                    enqueue([pid for u in memory.search_summaries(search.query, search_k) for pid in u.page_ids])
                else:
                    enqueue(memory.search_pages(search.query, keyword_k))
        parse_failures = int(stop.endswith("_unparseable"))  # an unparseable reply ends the rounds
        linked = [x for x in quotes if x.page_id is not None]
        snippets = select_snippets(q, memory.raw.get_many(read), linked, max_snippets)
        answer = clean_answer(meter.chat(llm, research_messages(q, date, linked, snippets), answer_max_tokens))
    except LLMError as exc:
        error, stop = f"LLMError: {exc}", "llm_error"
    cost = meter.finish()
    cost.pages_read, cost.rounds = len(read), rounds
    return ResearchResult(answer, read, rounds, quotes, cost, parse_failures, error, stop, searches)
