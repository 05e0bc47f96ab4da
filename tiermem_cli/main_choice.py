"""The demo's main router by its worst domain on out-of-fold train + validation scores against the features router;
routers calibrated on one split are named, not candidates; the test split is never read (docs/DESIGN.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiermem import contract, stats
from tiermem.settings.errors import DataError

BASELINE = "features"
CHOICE_FILE = "main_choice.json"
SPLITS = ("train", "validation")  # what cross-validation scores out of fold; the test split is never read
OUT_OF_FOLD = "out_of_fold"


def oof_scores(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]] | None:
    """(conv_id, qid) -> the calibration record (domain, label, score) of the labeled train + validation questions,
    when the router was calibrated on out-of-fold scores; None when it was calibrated on one split."""
    from evaluation.calibrate import SCORES_FILE

    path = run_dir / SCORES_FILE
    if not path.is_file():
        raise DataError(f"{path}: not found; run calibrate on this router first (it writes the scores it used)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        rows = doc["records"]
        if not isinstance(rows, list):
            raise TypeError("records is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not a calibration scores file ({exc})") from None
    if doc.get("scores_from") != OUT_OF_FOLD:
        return None
    out = {}
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or r.get("split") not in SPLITS or r.get("label") not in contract.ACTIONS:
            continue
        for name in ("conv_id", "qid", "domain"):
            if not isinstance(r.get(name), str):
                raise DataError(f"{path}: record {i}: field {name!r} must be a string, got {r.get(name)!r}")
        score = r.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not np.isfinite(score):
            raise DataError(f"{path}: record {i}: field 'score' must be a finite number, got {score!r}")
        key = (r["conv_id"], r["qid"])
        if key in out:  # which copy's score to compare is not ours to guess
            raise DataError(f"{path}: record {i}: question (conv_id={key[0]!r}, qid={key[1]!r}) is scored twice")
        out[key] = r
    return out


def unlike_sets(scores: dict[str, dict], domains_of: dict) -> str | None:
    """Why routers' validation scores cannot be compared (None when they can): every router must have scored the
    same questions as the features router, each of the same domain, and there must be some."""
    if not domains_of:
        return f"the {BASELINE} router scored no labeled {'/'.join(SPLITS)} question"
    for name, rows in scores.items():
        missing, extra = set(domains_of) - set(rows), set(rows) - set(domains_of)
        moved = sorted(k for k in set(rows) & set(domains_of) if rows[k]["domain"] != domains_of[k])
        if missing or extra or moved:
            gone = sorted({domains_of[k] for k in missing})
            return (f"{name} did not score the same questions as the {BASELINE} router ({len(missing)} "
                    f"of its {len(domains_of)} missing{f', domains {gone} among them' if gone else ''}; "
                    f"{len(extra)} others; {len(moved)} in another domain); calibrate every router on the same data")
    return None


def compare(candidate: dict, baseline: dict, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per domain, on the questions both scored: each AUROC and the paired difference candidate - baseline with
    its 95% interval (conversations resampled)."""
    keys = sorted(set(candidate) & set(baseline))
    out: dict[str, Any] = {}
    for domain in sorted({candidate[k]["domain"] for k in keys}):
        ks = [k for k in keys if candidate[k]["domain"] == domain]
        y = [candidate[k]["label"] == "ESCALATE" for k in ks]
        if not 0 < sum(y) < len(y):
            out[domain] = {"n": len(ks), "note": "one label only: no AUROC"}
            continue
        a, b = [candidate[k]["score"] for k in ks], [baseline[k]["score"] for k in ks]
        counts = stats.bootstrap_counts([k[0] for k in ks], n_boot=n_boot, seed=seed)
        diff = stats.auroc_reps(a, y, counts) - stats.auroc_reps(b, y, counts)
        out[domain] = {"n": len(ks), "n_conversations": len({k[0] for k in ks}), "auroc": stats.auroc(a, y),
                       f"{BASELINE}_auroc": stats.auroc(b, y),
                       "difference": stats.interval(stats.auroc(a, y) - stats.auroc(b, y), diff)}
    return out


def choose_main(root: Path, candidates: Sequence[str]) -> dict[str, Any]:
    """The choice and its table (written to <root>/main_choice.json): `served` is a candidate or `features`."""
    from tiermem.runs.safe_io import write_atomic

    baseline = oof_scores(root / BASELINE)
    found = {name: oof_scores(root / name) for name in candidates}
    scores = {n: v for n, v in found.items() if v is not None}
    left_out = {n: "calibrated on one split: no out-of-fold scores" for n, v in found.items() if v is None}
    split = f"{'+'.join(SPLITS)}, out of fold"
    unlike = (f"the {BASELINE} router has no out-of-fold scores" if baseline is None else
              "no trained router has out-of-fold scores" if not scores else
              unlike_sets(scores, {k: r["domain"] for k, r in baseline.items()}))
    if unlike:  # a router compared on other questions (or none) could look better than it is: no choice
        choice = {"split": split, "domains": sorted({r["domain"] for r in (baseline or {}).values()}),
                  "candidate": None, "served": BASELINE, "worst_domain_auroc": {}, "by_router": {},
                  "not_candidates": left_out, "reason": f"no choice: {unlike}; the {BASELINE} router is served"}
        write_atomic(root / CHOICE_FILE, json.dumps(choice, indent=2) + "\n")
        return choice
    assert baseline is not None
    table = {name: compare(rows, baseline) for name, rows in scores.items()}
    domains = sorted({d for t in table.values() for d in t})
    worst = {n: min((t[d].get("auroc", float("-inf")) for d in domains if d in t), default=float("-inf"))
             for n, t in table.items()}
    best = max(scores, key=lambda n: worst[n])  # ties: step order
    holds = all(d in table[best] and table[best][d].get("auroc") is not None
                and table[best][d]["auroc"] >= table[best][d][f"{BASELINE}_auroc"] for d in domains)
    choice = {"split": split, "domains": domains, "candidate": best, "served": best if holds else BASELINE,
              "worst_domain_auroc": {n: (None if not np.isfinite(v) else v) for n, v in worst.items()},
              "by_router": table, "not_candidates": left_out,
              "reason": (f"{best} has the best worst-domain out-of-fold AUROC and is at or above the features router "
                         "on every domain" if holds else
                         f"{best} has the best worst-domain out-of-fold AUROC but is below the features router on "
                         "some domain: the features router is served")}
    write_atomic(root / CHOICE_FILE, json.dumps(choice, indent=2) + "\n")
    return choice


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"


def choice_table(choice: dict[str, Any]) -> str:
    lines = ["| router | domain | questions (conversations) | AUROC | features AUROC | router - features [95%] |",
             "|---|---|---|---|---|---|"]
    for name, table in choice["by_router"].items():
        for domain, row in table.items():
            if "auroc" not in row:
                lines.append(f"| {name} | {domain} | {row['n']} | {row.get('note')} | | |")
                continue
            d = row["difference"]
            lines.append(f"| {name} | {domain} | {row['n']} ({row['n_conversations']}) | {row['auroc']:.3f} | "
                         f"{row[f'{BASELINE}_auroc']:.3f} | {_signed(d['estimate'])} "
                         f"[{_signed(d['lo'])}, {_signed(d['hi'])}] |")
    lines += [f"| {name} | not a candidate: {why} | | | | |" for name, why in choice.get("not_candidates", {}).items()]
    return "\n".join(lines)
