"""Careful-reading verdicts that labels and routers are checked against (`tiermem-judgments`,
`realmem-careful-reading` v2); labels are never made from them, and a verdict speaks only for the units it read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labeling.dataset import RecordError
from labeling.judgments.format import FORMAT, MATCH_OUTCOMES, Judgments, _get, parse_judgments
from tiermem import stats
from tiermem.data.textfile import jsonl_records, read_utf8
from tiermem.runs.safe_io import check_file_path
from tiermem.settings.errors import MissingFileError

REALMEM_FORMAT, REALMEM_VERSION = "realmem-careful-reading", 2


@dataclass(frozen=True)
class Verdict:
    sufficient: bool
    n_needed: int | None = None  # the history details the informed reading says the reply needs (RealMem)


class Verdicts:
    """Every verdict of one or more files; `match` answers per record, as `Judgments.match` does."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.path = ", ".join(paths)
        self.judgments: list[Judgments] = []
        self.by_key: dict[tuple[str, str], tuple[tuple[str, ...], Verdict]] = {}

    def match(self, conv_id: str, qid: str, question: str, texts: Sequence[str]) -> tuple[Verdict | None, str]:
        key = (str(conv_id), str(qid))
        for judgments in self.judgments:
            if key in judgments.by_key:
                judged, why = judgments.match(conv_id, qid, question, texts)
                return (None if judged is None else Verdict(judged.sufficient)), why
        if key not in self.by_key:
            return None, "no_judgment"
        units, verdict = self.by_key[key]
        return (verdict, "matched") if tuple(texts) == units else (None, "units_differ")


def _field(obj: Any, name: str, kind: Any, where: str) -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise RecordError(f"{where}: field {name!r} is missing" if isinstance(obj, dict)
                          else f"{where} must be a JSON object, got {type(obj).__name__}")
    return _get(obj, name, kind, where)  # the judgments' one field reader: kind, presence, lone surrogates


def _realmem(verdicts: Verdicts, path: Path, lines: list[tuple[int, Any]]) -> None:
    for number, obj in lines:
        where = f"{path}: line {number}"
        key = (_field(obj, "person", str, where), _field(obj, "query_id", str, where))
        units = tuple(_field(u, "text", str, f"{where}: field 'units[{k}]'")
                      for k, u in enumerate(_field(obj, "units", list, where)))
        informed = _field(obj, "informed", dict, where)
        needed = informed.get("needed_history")
        n_needed = len([p for p in needed.split(";") if p.strip()]) if isinstance(needed, str) else None
        if key in verdicts.by_key:
            raise RecordError(f"{where}: request {key[1]!r} of {key[0]!r} has a verdict already")
        verdicts.by_key[key] = (units, Verdict(_field(informed, "sufficient", bool, f"{where}: field 'informed'"),
                                               n_needed))


def load_verdicts(paths: str | Sequence[str]) -> Verdicts:
    """The verdicts of every file, or an error naming the file, the line and the field."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    verdicts = Verdicts(paths)
    for name in paths:
        path = Path(name)
        if not path.exists():
            raise MissingFileError(f"verdicts file {path} not found (verdicts: a tiermem-judgments or "
                                   f"{REALMEM_FORMAT} .jsonl)")
        check_file_path(path, "verdicts")
        text = read_utf8(path, RecordError)
        lines = list(jsonl_records(text, path, RecordError))
        header = lines[0][1] if lines else None
        kind = header.get("format") if isinstance(header, dict) else None
        if kind == FORMAT:
            verdicts.judgments.append(parse_judgments(path, text))
        elif kind == REALMEM_FORMAT and header.get("version") == REALMEM_VERSION and len(lines) > 1:
            _realmem(verdicts, path, lines[1:])
        else:
            raise RecordError(f"{path}: line 1 must be a header saying \"format\": \"{FORMAT}\" or "
                              f"\"{REALMEM_FORMAT}\" (version {REALMEM_VERSION}) followed by verdicts, "
                              f"got {header!r:.120}")
    return verdicts


def _bucket(n: int | None) -> str:
    return "unknown" if n is None else str(n) if n <= 2 else "3-5" if n <= 5 else "6+"


def agreement(records: Sequence[dict[str, Any]], verdicts: Verdicts, n_boot: int = 1000) -> dict[str, Any]:
    """How the labels agree with the verdicts on the natural records whose units a verdict read (95% interval
    resampling conversations)."""
    natural = [r for r in records if not r.get("augmentation") and not r.get("error")]
    outcomes: Counter = Counter()
    rows = []
    for r in natural:
        texts = [str(u.get("text", "")) for u in r.get("router_summaries") or []]
        verdict, why = verdicts.match(str(r.get("conv_id")), str(r.get("qid")), str(r.get("question")), texts)
        outcomes[why] += 1
        if verdict is not None and r.get("label") is not None:
            rows.append((r, (r["label"] == "ANSWER") == verdict.sufficient))
    agree = np.asarray([ok for _, ok in rows], dtype=np.float64)
    estimate = float(agree.mean()) if rows else None
    reps = stats.weighted_mean(agree, stats.bootstrap_counts([r["conv_id"] for r, _ in rows], n_boot)) \
        if rows and n_boot > 0 else np.zeros(0)  # n_boot 0: intervals off, as eval's bootstrap says

    def table(key: Any) -> dict[str, dict[str, int]]:
        out: dict[str, Counter] = {}
        for r, ok in rows:
            out.setdefault(str(key(r)), Counter()).update({"n": 1, "agree": int(ok)})
        return {k: dict(v) for k, v in sorted(out.items())}

    return {"verdicts": verdicts.path, "natural": len(natural),
            "labeled": sum(1 for r in natural if r.get("label") is not None),
            "by_match": {k: outcomes.get(k, 0) for k in MATCH_OUTCOMES}, "n": len(rows),
            "agree": int(agree.sum()), "agreement": stats.interval(estimate, reps),
            "by_category": table(lambda r: r.get("category")),
            "by_details": table(lambda r: _bucket(r.get("reply_details") if r.get("reply_details") is not None
                                                  else r.get("n_gold"))),
            "by_points": table(lambda r: _bucket(r.get("n_points")))}


def agreement_lines(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    a, m = result["agreement"], result["by_match"]
    shown = "-" if a is None else f"{a['estimate']:.3f}" + (
        f" [{a['lo']:.3f}, {a['hi']:.3f}]" if a.get("lo") is not None else "")
    lines = ["", "## Agreement with careful reading", "",
             f"Verdicts {result['verdicts']}: {result['n']} labeled records read over exactly their units agree on "
             f"{result['agree']} ({shown}, 95% interval resampling conversations); {result['labeled']} of "
             f"{result['natural']} natural records labeled; match: {m['matched']} matched, {m['units_differ']} over "
             f"other units, {m['question_differs']} with another question text, {m['no_judgment']} without a "
             "verdict.", ""]
    for name, title in (("by_category", "category"), ("by_details", "needed details (reply rule; else gold turns)"),
                        ("by_points", "memory points named")):
        lines += [f"| {title} | labeled, matched | agree |", "|---|---|---|"]
        lines += [f"| {k} | {v['n']} | {v['agree']} ({v['agree'] / v['n']:.2f}) |" for k, v in result[name].items()]
        lines.append("")
    return lines
