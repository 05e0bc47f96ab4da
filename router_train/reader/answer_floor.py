"""The extractive answerer's floor: the reader logit under which `ask` says the memory does not state the answer.

    python -m router_train.reader.answer_floor reader=runs/reader_pretrain           # a reader-pretrain checkpoint
    python -m router_train.reader.answer_floor reader=runs/reader pretrain=runs/reader_pretrain  # a unit-reader's

Calibrated, not guessed: on the articles the reader-pretrain checkpoint held out of training, every question's
paragraph is split into sentences and scored; the best sentence's logit is the answerer's own decision ("some
sentence of what was read answers this"), and SQuAD 2.0's unanswerable questions were written to look answered.
The floor is the threshold on that logit with the largest Youden's J (true-positive rate minus false-positive
rate over answerable vs unanswerable questions), the midpoint between the two logits it falls between. New
checkpoints store it in reader_pretrain.json (`heldout.answer_floor`); this command writes `answer_floor.json`
into an existing reader directory (a checkpoint from before, or a unit-reader run whose reader started from one).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiermem.settings.errors import ConfigError, DataError, MissingFileError, stage_main

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


def best_sentence_logits(reader: Any, questions: Sequence[Any]) -> list[float]:
    """Each question's best logit over the sentences of its paragraph, every pair scored in shared batches."""
    from tiermem.text.sentences import sentence_spans

    flat = [(i, q.question, q.context[s:e]) for i, q in enumerate(questions) for s, e in sentence_spans(q.context)]
    logits = reader.logits([p[1] for p in flat], [p[2] for p in flat])
    best = [float("-inf")] * len(questions)
    for (i, _, _), v in zip(flat, logits, strict=True):
        best[i] = max(best[i], v)
    return best


def current_floor(reader_dir: str | Path) -> dict[str, Any] | None:
    """The reader directory's `answer_floor.json` when `ask` would use it: read by the one floor reader
    (tiermem.models.floors), its floor a finite number bound to these weights. None when absent; a stored floor
    `ask` would refuse is said so and None (recalibrated, never reported as current)."""
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
    """Write `floor` (its `floor` field the threshold) to `<reader_dir>/answer_floor.json`, bound to the sha256 of the
    reader's weights (`reader_weights_sha256`): the one place a floor file is written."""
    from tiermem.models.floors import weights_sha256
    from tiermem.runs.safe_io import write_atomic

    reader_dir = Path(reader_dir)
    out = {**floor, "reader_weights_sha256": weights_sha256(reader_dir)}
    write_atomic(reader_dir / FLOOR_FILE, json.dumps(out, indent=2) + "\n")
    return out


def _pretrain_meta(pretrain: Path) -> dict[str, Any]:
    from tiermem.models.cross_encoder import PRETRAIN_FILE
    from tiermem.models.floors import read_pretrain_meta

    path = pretrain / PRETRAIN_FILE
    if not path.is_file():
        raise MissingFileError(f"{path} not found: the floor is calibrated on a reader-pretrain checkpoint's held-out "
                               "articles (make reader-pretrain)")
    return read_pretrain_meta(pretrain, need=("data", "data_sha256", "heldout_articles"))  # one reader


def check_heldout_articles(questions: Sequence[Any], meta: dict[str, Any], pretrain: Any) -> None:
    """The articles a checkpoint's metadata calls held out are the ones its training held out: the split its
    config gives (router_train.reader.reading_data.heldout_split) on the data it was trained on. A list holding a
    training article would calibrate the floor on text the reader was trained on and call it held out."""
    from router_train.reader.reading_data import heldout_split
    from tiermem.models.floors import ReaderFileError

    config = meta.get("config")
    count, seed = (config or {}).get("heldout_articles"), (config or {}).get("seed")
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(seed, int) or isinstance(seed, bool):
        raise ReaderFileError(f"{pretrain}/reader_pretrain.json: config.heldout_articles and config.seed (whole "
                              "numbers) are needed to check which articles its training held out; rebuild the "
                              "checkpoint (tiermem-router reader-pretrain)")
    held = heldout_split(questions, count, seed)[2]
    listed = sorted(meta["heldout_articles"])
    if listed != sorted(held):
        trained = sorted(set(listed) - set(held))
        raise ReaderFileError(f"{pretrain}/reader_pretrain.json: heldout_articles {listed} are not the articles its "
                              f"training held out ({held})" + (f"; {trained} were trained on" if trained else "")
                              + ": rebuild the checkpoint (tiermem-router reader-pretrain)")


def calibrate(reader_dir: str | Path, pretrain: str | Path | None = None, data: str = "") -> dict[str, Any]:
    """Score the held-out articles of `pretrain` (default: `reader_dir` itself) with the reader in `reader_dir`
    and write its floor to `reader_dir/answer_floor.json`."""
    from router_train.reader.reading_data import load_reading_data
    from tiermem.models.model_dir import load_reader
    from tiermem.models.specs import setup_cpu_threads
    from tiermem.runs.rundir import updating_run

    reader_dir, pretrain = Path(reader_dir), Path(pretrain or reader_dir)
    meta = _pretrain_meta(pretrain)
    source = data or meta["data"]
    questions, sha = load_reading_data(source, meta.get("config", {}).get("hub_split", "validation"))
    if sha != meta["data_sha256"]:
        raise DataError(f"reading data {source}: sha256 {sha[:12]} is not the data {pretrain} was trained on "
                        f"({meta['data_sha256'][:12]}); its held-out articles would not be held out")
    held = set(meta["heldout_articles"])
    check_heldout_articles(questions, meta, pretrain)  # the articles its training held out, not others
    heldout = [q for q in questions if q.article in held]
    if not heldout:
        raise DataError(f"reading data {source}: none of the held-out articles {sorted(held)}")
    setup_cpu_threads()
    with updating_run(reader_dir, "answer-floor", kinds=("reader-pretrain", "unit-reader")):
        reader = load_reader(reader_dir, "reader=")
        floor = write_floor(reader_dir, {
            **calibrated_floor(best_sentence_logits(reader, heldout), [q.answerable for q in heldout]),
            "heldout_from": str(pretrain), "heldout_articles": sorted(held)})
    return floor


@dataclass
class AnswerFloorConfig:
    reader: str = "runs/reader_pretrain"  # the reader directory (a reader-pretrain checkpoint or a unit-reader run)
    pretrain: str = ""  # the checkpoint whose held-out articles calibrate it; "" = `reader` itself
    data: str = ""  # the reading data; "" = the file the checkpoint was trained on (its sha256 is checked)

    def __post_init__(self) -> None:
        if not self.reader:
            raise ConfigError("reader must name a reader directory")


@stage_main("answer-floor")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(AnswerFloorConfig, argv)
    print(json.dumps(calibrate(cfg.reader, cfg.pretrain or None, cfg.data), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
