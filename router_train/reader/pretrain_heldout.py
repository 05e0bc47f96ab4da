"""What a reader-pretrain checkpoint holds out (whole SQuAD articles, whole chat dialogues) and its answerability
on them per source."""

from __future__ import annotations

from typing import Any


def split_sources(cfg: Any, questions: list) -> tuple[list, list, dict[str, list[str]]]:
    """(train, held out, held-out titles per source), as many as the reader-pretrain `cfg` says, seeded."""
    from router_train.reader.reading_data import heldout_split
    from tiermem.settings.errors import DataError

    train, held, titles = [], [], {}
    for source in sorted({q.source for q in questions}):
        qs = [q for q in questions if q.source == source]
        n = cfg.heldout_articles if source == "squad" else cfg.heldout_dialogues
        try:
            t, h, names = heldout_split(qs, n, cfg.seed)
        except DataError as exc:
            raise DataError(f"{source}: {exc} (heldout_{'articles' if source == 'squad' else 'dialogues'})") from None
        train, held, titles[source] = train + t, held + h, names
    return train, held, titles


def _safe_auroc(scores: list[float], labels: list[bool]) -> float | None:
    from tiermem.stats import auroc

    return round(auroc(scores, labels), 4) if 0 < sum(labels) < len(labels) else None


def heldout_metrics(reader: Any, questions: list) -> dict[str, Any]:
    """Held-out answerability per source: per pair, per question (best unit's score; none for an all-answerable
    source), and gold unit vs the same unit with its answer cut out; for the classifier and, with a span head, the
    span margin. SQuAD's best-sentence logits also calibrate the extractive answerer's floor."""
    from router_train.reader.answer_floor import calibrated_floor
    from router_train.reader.checks import check_scores
    from router_train.reader.reading_data import question_pairs

    out: dict[str, Any] = {}
    for source in sorted({q.source for q in questions}):
        qs = [q for q in questions if q.source == source]
        pairs = [p for q in qs for p in question_pairs(q, negatives=3, erased=True)]
        units = [(q.question, q.context[s:e]) for q in qs for s, e in q.unit_spans()]
        flat = list(dict.fromkeys([*units, *((p[0], p[1]) for p in pairs)]))
        got = reader.read([p[0] for p in flat], [p[1] for p in flat])
        check_scores([*got.logits, *(got.span_margins or [])], "reader-pretrain")
        heads = {"classifier": got.logits, **({"span": got.span_margins} if got.span_margins is not None else {})}
        row: dict[str, Any] = {"questions": len(qs), "answerable": sum(q.answerable for q in qs), "pairs": len(pairs)}
        plain = [p for q in qs for p in question_pairs(q, negatives=3)]
        known = set(plain)
        erased = [p for p in pairs if p not in known] + [p for p in plain if p[2] > 0.5]
        for head, values in heads.items():
            score = dict(zip(flat, values, strict=True))
            best = [max(score[(q.question, q.context[s:e])] for s, e in q.unit_spans()) for q in qs]
            prefix = "" if head == "classifier" else "span_"
            row[f"{prefix}pair_auroc"] = _safe_auroc([score[(p[0], p[1])] for p in plain], [p[2] > 0.5 for p in plain])
            row[f"{prefix}question_auroc"] = _safe_auroc(best, [q.answerable for q in qs])
            row[f"{prefix}erased_auroc"] = _safe_auroc([score[(p[0], p[1])] for p in erased],
                                                       [p[2] > 0.5 for p in erased])
            if source == "squad" and head == "classifier" and row["question_auroc"] is not None:
                row["answer_floor"] = calibrated_floor(best, [q.answerable for q in qs])  # `ask`'s extractive floor
        out[source] = row
    squad = out.get("squad") or {}
    # the first-level keys read before chat sources existed (unit-reader's card, ask's floor)
    return {**{k: squad[k] for k in ("questions", "answerable", "pairs", "pair_auroc", "question_auroc",
                                     "answer_floor") if k in squad}, "by_source": out}
