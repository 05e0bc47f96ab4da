"""The extractive answerer's floor: the reader logit under which `ask` says the memory does not state the answer
(Youden's J over answerable vs unanswerable questions); `answer_floor.json` is written here only."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiermem.settings.errors import DataError

FLOOR_FILE = "answer_floor.json"
METHOD = "youden: max TPR - FPR of the best sentence's logit, answerable vs unanswerable held-out questions"


def calibrated_floor(best_logits: Sequence[float], answerable: Sequence[bool]) -> dict[str, Any]:
    """The threshold on the best sentence's logit that best separates answerable from unanswerable questions."""
    pos = sorted(float(x) for x, a in zip(best_logits, answerable, strict=True) if a)
    neg = sorted(float(x) for x, a in zip(best_logits, answerable, strict=True) if not a)
    if not pos or not neg:
        raise DataError(f"answer floor: needs answerable and unanswerable questions, got {len(pos)} and {len(neg)}")
    values = sorted(set(pos + neg))
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] or [values[0]]
    best: tuple[float, float, float, float] | None = None
    for cut in cuts:
        tpr = sum(x >= cut for x in pos) / len(pos)
        fpr = sum(x >= cut for x in neg) / len(neg)
        if best is None or tpr - fpr > best[0]:
            best = (tpr - fpr, cut, tpr, fpr)
    assert best is not None
    out = {"floor": round(best[1], 4), "youden_j": round(best[0], 4), "tpr": round(best[2], 4),
           "fpr": round(best[3], 4), "questions": len(pos) + len(neg), "answerable": len(pos), "method": METHOD}
    if best[0] <= 0:  # the reader scores unanswerable questions as high as answerable ones, or higher
        out["warning"] = (f"Youden's J is {best[0]:.3f}: this floor tells answerable from unanswerable questions no "
                          "better than chance; the reader cannot be trusted to say what the memory states")
        print(f"answer floor: warning: {out['warning']}", file=sys.stderr)
    return out


def current_floor(reader_dir: str | Path) -> dict[str, Any] | None:
    """The reader directory's `answer_floor.json` when `ask` would use it (tiermem.models.floors); None when absent
    or when `ask` would refuse it (said so: recalibrated, never reported as current)."""
    from tiermem.models.floors import ReaderFileError, floor_number, read_json_object, weights_sha256

    path = Path(reader_dir) / FLOOR_FILE
    if not path.is_file():
        return None
    try:
        stored = read_json_object(path)
        floor_number(stored.get("floor"), path, "floor")
    except ReaderFileError as exc:
        print(f"answer-floor: {exc.args[0].split('; ')[0]}: recalibrating", file=sys.stderr)
        return None
    return stored if stored.get("reader_weights_sha256") == weights_sha256(reader_dir) else None


def write_floor(reader_dir: str | Path, floor: dict[str, Any]) -> dict[str, Any]:
    """Write `floor` to `<reader_dir>/answer_floor.json`, bound to the sha256 of the reader's weights."""
    from tiermem.models.floors import weights_sha256
    from tiermem.runs.safe_io import write_atomic

    reader_dir = Path(reader_dir)
    out = {**floor, "reader_weights_sha256": weights_sha256(reader_dir)}
    write_atomic(reader_dir / FLOOR_FILE, json.dumps(out, indent=2) + "\n")
    return out
