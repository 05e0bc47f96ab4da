"""Out-of-fold router scores (a router run's oof_scores.json): each train + validation question scored by a model that
never saw its conversation, for calibrate and the demo (docs/DESIGN.md, "Out-of-fold scores for calibration")."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiermem import contract
from tiermem.runs.run_meta import sha256_file
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.errors import DataError

OOF_SCORES_FILE = "oof_scores.json"
FORMAT = "tiermem out-of-fold router scores v1"
# what replay and calibration read of a label record (evaluation.metrics.to_case / classify, calibration clusters)
REPLAY_FIELDS = ("qid", "conv_id", "split", "source", "category", "label", "drop_reason", "error", "s_ok", "r_ok",
                 "s_ok_outcome", "r_ok_outcome", "s_ok_evidence", "r_ok_evidence", "cost_summary_input_tokens",
                 "cost_research_input_tokens", "cost_summary_wall_s", "cost_research_wall_s")


def loco(records: Sequence[dict[str, Any]],
         score_held: Callable[[np.ndarray, np.ndarray], Sequence[float]]) -> list[float]:
    """Each record's out-of-fold score: per conversation, `score_held(fit, held)` (masks over `records`: the others'
    labeled records to fit on, this one's records, labeled or not) returns the held records' scores, in order."""
    conv = np.array([str(r["conv_id"]) for r in records])
    labeled = np.array([r.get("label") in contract.ACTIONS for r in records])
    out = np.full(len(records), np.nan)
    for c in sorted(set(conv)):
        held = conv == c
        out[held] = np.asarray(score_held(labeled & ~held, held), dtype=np.float64)
    if not np.isfinite(out).all():
        raise DataError("out-of-fold scores: a held-out conversation got a non-finite score")
    return out.tolist()


def write_oof_scores(run_dir: str | Path, records: Sequence[dict[str, Any]], scores: Sequence[float],
                     about: dict[str, Any]) -> dict[str, Any]:
    """oof_scores.json in `run_dir` (`about`, then records' replay fields and `score`); returns extra.oof_scores."""
    if len(records) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(records)} records")
    rows = [{**{k: r[k] for k in REPLAY_FIELDS if k in r}, "score": float(s)}
            for r, s in zip(records, scores, strict=True)]
    path = Path(run_dir) / OOF_SCORES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"format": FORMAT, **about, "n": len(rows), "records": rows}, indent=1) + "\n")
    return {"file": OOF_SCORES_FILE, "sha256": sha256_file(path), "n": len(rows),
            "n_conversations": len({str(r["conv_id"]) for r in records}), "splits": about.get("splits")}


def read_oof_scores(run_dir: str | Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """The run's oof_scores.json checked against `recorded` (extra.oof_scores); DataError if missing, changed or bad."""
    path = Path(run_dir) / str(recorded.get("file") or OOF_SCORES_FILE)
    if not path.is_file():
        raise DataError(f"{path}: not found, but the run's tiermem_router.json records out-of-fold scores")
    if sha256_file(path) != recorded.get("sha256"):
        raise DataError(f"{path}: its sha256 differs from the one recorded in tiermem_router.json (changed after "
                        "the stage wrote it); retrain, or calibrate with scores_from=split")
    data = json.loads(path.read_text())
    rows = data.get("records") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows or data.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT!r} file with records")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("score"), int | float) or "conv_id" not in row:
            raise DataError(f"{path}: record {i} needs conv_id and a numeric score")
    return data
