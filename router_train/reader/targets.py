"""What the unit reader learns from each retrieved unit: which targets (lexical, judged, both) and where it points.

A unit's target says how far it states the question's answer:
- `lexical`: the label rule's own measure of the unit alone (its answer recall, or its one-unit verdict `s_ok`);
- `judged`: a careful reading of the unit (labeling/judgments/format.py: yes 1, partial 0.5, no 0), the lexical target
  where the unit was not judged (deeper ranks, questions whose units the judgments did not read);
- `both`: the mean of the two where both exist.
With span targets on, a judged unit also tells the span head which words answer: the quoted span (a judged yes or
partial) or no answer at all (a judged no), the SQuAD 2.0 target; units without a judgment train the span margin
as a second logit of the same target, as without span targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labeling.judgments.format import VERDICT_TARGET
from serving.routers.unit_reader import unit_text
from tiermem.settings.errors import DataError

TARGET_SOURCES = ("lexical", "judged", "both")
# what the unit reader's head is fitted towards: the label (ESCALATE 1, ANSWER 0), or the teacher's recorded
# decision as a probability (its confidence; the label where no decision was recorded): the teacher distilled
HEAD_TARGETS = ("label", "teacher")
NO_ANSWER = (-1, -1)  # a span target that says "no span in this unit" (the span head's [CLS])

# (question, unit text as the reader reads it, target in [0, 1], span target: None (none given), NO_ANSWER, or the
# answer's (start, end) character offsets in the text)
Pair = tuple[str, str, float, tuple[int, int] | None]


def targets_name(source: str, spans: bool) -> str:
    """How the CV table names a target setting: `judged`, `judged+spans`."""
    return f"{source}+spans" if spans else source


def parse_targets(name: str) -> tuple[str, bool]:
    source, _, spans = name.partition("+")
    return source, spans == "spans"


def unit_target(u: dict[str, Any], target: str, source: str) -> float | None:
    """The unit's target under `source`; None when it has none (no scorable gold token and no judgment)."""
    lexical = None if u["answer_recall"] is None else (float(u["answer_recall"]) if target == "recall"
                                                       else float(u["s_ok"]))
    judged = VERDICT_TARGET[u["verdict"]] if u.get("verdict") else None
    if source == "lexical" or judged is None:
        return lexical
    if source == "judged" or lexical is None:
        return judged
    return (lexical + judged) / 2


def span_target(u: dict[str, Any]) -> tuple[int, int] | None:
    """The judged answer's character offsets in unit_text(u), NO_ANSWER for a judged no, None when not judged (or
    the quoted words are not in the unit's text, which the judgments never do: then no span target is given)."""
    verdict = u.get("verdict")
    if not verdict:
        return None
    if verdict == "no" or not u.get("span"):
        return NO_ANSWER if verdict == "no" else None
    shown, text = unit_text(u), str(u["text"])
    at = text.find(u["span"])
    if at < 0:
        return None
    start = len(shown) - len(text) + at  # unit_text prefixes the date; a clipped text has no such span
    if shown[start: start + len(u["span"])] != u["span"]:
        return None
    return start, start + len(u["span"])


def pairs(records: Sequence[dict[str, Any]], target: str, deep_negatives: int, source: str = "lexical",
          spans: bool = False, deep_positives: int | None = None) -> list[Pair]:
    """The reader's training pairs: router units, the `deep_positives` deeper positives with the highest targets
    (all when None) and the `deep_negatives` highest-ranked deeper negatives of each record, each with its target
    under `source` (and span target, with `spans`)."""
    if source not in TARGET_SOURCES:
        raise DataError(f"target source must be one of {TARGET_SOURCES}, got {source!r}")
    out: list[Pair] = []
    for r in records:
        k, negatives, positives = len(r["router_summaries"]), [], []
        for u in r["unit_targets"]:
            y = unit_target(u, target, source)
            if y is None:  # the gold answer has no scorable token and nobody judged the unit: no target
                continue
            if not 0.0 <= y <= 1.0:
                raise DataError(f"record {r['qid']!r}: unit {u['unit_id']!r} target {y} outside [0, 1]")
            if u["rank"] <= k:
                out.append((r["question"], unit_text(u), y, span_target(u) if spans else None))
            else:
                (negatives if not u["s_ok"] and y == 0.0 else positives).append((u["rank"], y, u))
        # a long history restates a fact many times: its deeper partial matches can outnumber the rest of the pairs
        kept = sorted(positives, key=lambda p: (-p[1], p[0]))[:deep_positives]
        for _, y, u in sorted(kept + sorted(negatives, key=lambda p: p[0])[:deep_negatives], key=lambda p: p[0]):
            out.append((r["question"], unit_text(u), y, span_target(u) if spans else None))
    if records and not out:  # nothing to fine-tune on (the loss would divide by zero pairs)
        raise DataError(f"none of {len(records)} record(s) has a unit with a target: every answer_recall is null "
                        "or unit_targets is empty (relabel with unit_targets.enabled)")
    return out


def head_targets(rows: Sequence[dict[str, Any]], head_target: str) -> list[float]:
    """Each labeled row's target for the head: 1.0 / 0.0 for ESCALATE / ANSWER, or under `teacher` the recorded
    teacher decision's probability of ESCALATE (labeling.judgments.format.TeacherDecision.p_escalate), the label where
    the row has no recorded decision."""
    from labeling.teacher import teacher_decision

    if head_target not in HEAD_TARGETS:
        raise DataError(f"head target must be one of {HEAD_TARGETS}, got {head_target!r}")
    out = []
    for i, r in enumerate(rows):
        y = 1.0 if r["label"] == "ESCALATE" else 0.0
        decision = (teacher_decision(r.get("teacher"), f"record {i} (qid={r.get('qid')!r})")
                    if head_target == "teacher" else None)
        out.append(y if decision is None else decision.p_escalate())
    return out


def span_token_targets(reader: Any, train: Sequence[Pair]) -> list[tuple[int, int]]:
    """Token (start, end) of each pair's span target as the reader tokenizes the pair; (0, 0) ([CLS]) for
    NO_ANSWER; (-100, -100) where no span target is given or truncation cut the span off."""
    out = [(-100, -100)] * len(train)
    todo = [i for i, p in enumerate(train) if p[3] is not None]
    for s in range(0, len(todo), 256):
        chunk = todo[s: s + 256]
        enc = reader.encode([train[i][0] for i in chunk], [train[i][1] for i in chunk], offsets=True)
        for row, i in enumerate(chunk):
            span = train[i][3]
            if span == NO_ANSWER:
                out[i] = (0, 0)
                continue
            offsets = enc["offset_mapping"][row].tolist()
            toks = [t for t, (sid, (a, b)) in enumerate(zip(enc.sequence_ids(row), offsets, strict=True))
                    if sid == 1 and b > span[0] and a < span[1]]
            if toks:
                out[i] = (toks[0], toks[-1])
    return out
