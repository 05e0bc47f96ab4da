"""`tiermem-router ingest` (alias `ask`): build one conversation's two tiers, then answer a question through the
router, showing the route, the pages read and the cost (README.md, docs/serving.md)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tiermem.data.conversations import Conversation, Question, load_conversations
from tiermem.llm import LLMConfig, build_llm
from tiermem.memory.extractive import answerer_mode
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime, RuntimeAnswer
from tiermem.runs.rundir import claim_cache_dir
from tiermem.settings.config import parse_cli
from tiermem.settings.errors import UsageError

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ingest" / "default.yaml"


@dataclass
class IngestConfig:
    data: str = ""  # LoCoMo / LongMemEval / tiermem-format file; "" = the sample shipped with the package
    conversation: str = ""  # conversation id; "" = the first one in the file
    question: str | int = ""  # question id, 0-based index, or free text ("What did Tomas adopt?"); "" = the first
    # several questions answered in one process, models loaded once: a file with one question (id, index or free
    # text) a line
    questions: str = ""
    workdir: str = "runs/memory"  # tier cache root: <workdir>/<conv_id>-<key>/
    router: str = ""  # trained router dir or hub id (serving.Router.from_pretrained); "" = memory.fixed_policy
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)  # answerer, and summarizer when memory.summarizer=llm


def is_free_text(question: str) -> bool:
    """Ids and indexes never hold spaces or question marks; a question in words does."""
    return any(ch.isspace() for ch in question.strip()) or "?" in question


def pick(convs: list[Conversation], conv_id: str, question: str | int) -> tuple[Conversation, Question | str]:
    """The conversation and either one of its questions (by id or index) or the free question text."""
    question = str(question)
    if conv_id:
        matches = [c for c in convs if c.conv_id == conv_id]
        if not matches:
            raise UsageError(f"conversation {conv_id!r} not found; have {[c.conv_id for c in convs][:10]}")
        conv = matches[0]
    else:
        conv = convs[0]
    known = next((q for q in conv.questions if q.qid == question), None)
    if known is not None:
        return conv, known
    if is_free_text(question):
        return conv, question.strip()
    if not conv.questions:
        raise UsageError(f"conversation {conv.conv_id!r} has no questions in the file; ask one in words "
                         "(question=\"What did ...?\")")
    if question == "":
        return conv, conv.questions[0]
    if question.isdigit():
        index = int(question)
        if index >= len(conv.questions):
            raise UsageError(f"question index {index} out of range (conversation has {len(conv.questions)})")
        return conv, conv.questions[index]
    raise UsageError(f"question {question!r} not found in conversation {conv.conv_id!r}; ask a question of your "
                     "own in words (with a space or a question mark)")


def reading_lines(out: RuntimeAnswer) -> list[str]:
    """The extractive answerer's answer (tiermem.memory.extractive): the reader's best sentence, or "not stated"
    with the closest sentence when none scored above the reader's calibrated floor."""
    r = out.reading
    assert r is not None
    score = f"{r.logit:.2f}" if r.logit is not None else "none"
    lines = []
    if out.escalated_once:
        lines.append("  escalated once: no sentence of the summaries scored above the reader's floor; read the pages")
    if r.stated:
        lines += [f"answer: {out.answer}",
                  f"  extractive: the reader's best of {r.sentences} sentence(s) read (logit {score} >= floor "
                  f"{r.floor:.2f}; reader {r.reader}, {r.seconds:.2f} s)"]
    else:
        lines += [f"answer: not stated: the memory does not state it (best of {r.sentences} sentence(s) read scored "
                  f"{score}, under the reader's floor {r.floor:.2f})"]
        return lines + [f"closest: {r.best.cite()}" if r.best else "closest: none (nothing was read)"]
    return lines + [f"quote: {out.evidence.cite()}" if out.evidence else "quote: none"]


def answer_lines(out: RuntimeAnswer) -> list[str]:
    """The answer, where it came from, and the quote it rests on (always shown when there is one)."""
    if out.error is not None:
        return [f"answer: <error> {out.error}"]
    if out.reading is not None:
        return reading_lines(out)
    lines = [f"answer: {out.answer or '(empty)'}"]
    if out.answer_source == "extractive":
        lines.append(f"  extractive: the model's reply {out.lm_answer!r} was unusable ({out.fallback_reason}); "
                     "the answer is the best-matching sentence of what was read")
    elif out.fallback_reason:
        why = "nothing read matches the question" if out.evidence is None else "memory.answer_fallback=none"
        lines.append(f"  warning: the model's reply is unusable ({out.fallback_reason}); shown as it is ({why})")
    ev = out.evidence
    lines.append(f"quote: {ev.cite()}" if ev else "quote: none (nothing read matches the question)")
    return lines


def cost_line(out: RuntimeAnswer, routed: bool) -> str:
    """Tokens, calls and seconds of the path taken; a cached call is priced at what it cost when first made, and
    the line says so, with the time this run really took."""
    c = out.cost
    line = f"cost: {c.input_tokens} in / {c.output_tokens} out tokens, {c.llm_calls} LLM call(s), {c.wall_s:.2f} s"
    if c.cached_calls and c.cached_calls == c.llm_calls:
        line = (f"cost: cached: answered from the response cache in {out.elapsed_s:.2f} s; the original calls cost "
                f"{c.input_tokens} in / {c.output_tokens} out tokens, {c.llm_calls} LLM call(s), {c.wall_s:.2f} s")
    elif c.cached_calls:
        line += (f" ({c.cached_calls} of the {c.llm_calls} calls from the response cache, priced at their original "
                 f"cost; this run took {out.elapsed_s:.2f} s)")
    return line + (f" + router {out.router_s:.2f} s" if routed else "")


MAX_QUESTIONS = 10_000  # one process answers them one by one (about a second each): past this, split the file


def questions_of(cfg: IngestConfig) -> list[str | int]:
    """The questions to answer, in order: the `questions` file's lines (blank lines and `#` comments skipped), or the
    one `question`. A file and `question=` together is a usage error (neither is dropped without a word)."""
    if cfg.questions and str(cfg.question).strip():
        raise UsageError(f"questions={cfg.questions!r} and question= both given; ask with one of them")
    if cfg.questions:
        from tiermem.data.textfile import jsonl_lines, read_utf8

        path = Path(cfg.questions)
        if not path.is_file():
            raise UsageError(f"questions={cfg.questions!r}: no such file (one question a line)")
        lines = [ln.strip() for _, ln in jsonl_lines(read_utf8(path))]  # a bad byte: file and offset; BOM dropped
        asked: list[str | int] = [ln for ln in lines if ln and not ln.startswith("#")]
        if not asked:
            raise UsageError(f"questions={cfg.questions!r}: the file holds no question")
        if len(asked) > MAX_QUESTIONS:
            raise UsageError(f"questions={cfg.questions!r}: {len(asked)} questions; at most {MAX_QUESTIONS} a run "
                             "(split the file)")
        return asked
    return [cfg.question]


def main(argv: list[str]) -> int:
    cfg = parse_cli(IngestConfig, argv, default_config=DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    claim_cache_dir(cfg.workdir)  # tiers are built only in a tier cache, never inside another stage's run
    convs = load_conversations(cfg.data or None)
    asked = [pick(convs, cfg.conversation, q) for q in questions_of(cfg)]  # every id checked up front
    conv = asked[0][0]
    # the extractive answerer calls no LM: the packaged model is loaded only when something generates
    generates = answerer_mode(cfg.memory.answerer, cfg.llm.backend, cfg.llm.model) == "llm"
    llm = build_llm(cfg.llm) if generates or cfg.memory.summarizer == "llm" else None
    start = time.perf_counter()
    runtime = MemoryRuntime.open_or_build(cfg.workdir, conv, cfg.memory, llm=llm)
    built_s = time.perf_counter() - start
    stats = runtime.manifest["stats"]
    tier1 = "imported: the conversation's own" if runtime.memory.tier1 == "imported" else cfg.memory.summarizer
    print(f"conversation {conv.conv_id}: {stats['turns']} turns -> {stats['pages']} raw pages "
          f"(<= {cfg.memory.page_tokens} tokens; max {stats['page_tokens_max']}, mean {stats['page_tokens_mean']}) "
          f"and {len(runtime.memory.summaries)} summary units ({tier1})")
    print(f"tiers: {runtime.workdir} (ingest took {stats['seconds']:.1f} s when built; opened in {built_s:.1f} s)")
    router = None
    if cfg.router:
        from serving.routers import Router

        router = Router.from_pretrained(cfg.router)
    failed = 0
    for i, (_, question) in enumerate(asked):
        if len(asked) > 1:
            print(f"\n--- question {i + 1} of {len(asked)} ---")
        failed += show_answer(runtime, question, router)
    runtime.close()
    return 0 if not failed else 1


def show_answer(runtime: MemoryRuntime, question: Question | str, router: object | None) -> int:
    """Answer one question and print it (route, pages read, answer, quote, cost); 1 when the answer is an error."""
    out = runtime.answer(question, router)  # type: ignore[arg-type]
    if isinstance(question, Question):
        print(f"question {question.qid} [category {question.category}]: {question.question}")
        print(f"gold answer: {question.answer}   (evidence {', '.join(question.evidence) or 'none'})")
        if question.asked_before is not None:
            view = runtime.memory_for(question)
            print(f"memory as of turn {question.asked_before} (asked there): {len(view.all_pages())} of "
                  f"{runtime.memory.page_count()} pages, {view.unit_count()} of "
                  f"{len(runtime.memory.summaries)} summary units")
    else:
        print(f"question (free text): {question}")
        print("gold answer: none: a question of your own has no gold answer or evidence to check the answer against")
    for i, unit in enumerate(out.retrieved, 1):
        print(f"  summary {i} ({unit.score:.3f}, {unit.date}) {unit.text[:110]}")
    print(f"route: {out.action} by {out.decided_by}"
          + (f" (router {out.router_s * 1000:.0f} ms, parsed_ok={out.router_parsed_ok})" if router else ""))
    if out.research is not None and out.research.stop_reason == "extractive":
        print("research: the raw index's pages (time range, the summaries' provenance links, BM25), ranked by the "
              "reader; no LM")
        print(f"pages read: {', '.join(out.research.pages_read) or 'none'}")
    elif out.research is not None:
        r = out.research
        print(f"research: {r.rounds} round(s), stop={r.stop_reason}, "
              f"{len(r.linked)}/{len(r.quotes)} quotes linked, {r.parse_failures} parse failure(s)")
        print(f"pages read: {', '.join(r.pages_read) or 'none'}")
    else:
        print(f"pages read: none (answered from the {len(out.retrieved)} summaries above)")
    for line in answer_lines(out):
        print(line)
    print(cost_line(out, router is not None))
    return 0 if out.error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
