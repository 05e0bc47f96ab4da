"""`calibrate`: pick the router's threshold on a labeled split and store it in tiermem_router.json.

RouteLLM-style: score every record (p_escalate from the fast path), then choose the threshold that hits a
target escalation rate (the (1 - rate) quantile of the scores) or a target hard-recall (the share of
ESCALATE-labeled records that are escalated). The decision rule is `p_escalate >= threshold`; the stored
threshold becomes the router's default at load time.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serving.artifacts import update_run_meta

TARGETS = ("escalation_rate", "hard_recall")


@dataclass
class CalibrateConfig:
    router: str = "runs/grpo"  # run directory (or hub id) of the router to calibrate
    data: str = "runs/label/dataset"  # DatasetDict saved by `make label`, or a .jsonl of label records
    split: str = "validation"
    target: str = "escalation_rate"  # escalation_rate | hard_recall
    value: float = 0.5  # the target share, in (0, 1]
    batch_size: int = 8
    limit: int | None = None  # score only the first N labeled records (quick runs)
    write: bool = True  # store the threshold in the run directory's tiermem_router.json

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if not 0.0 < self.value <= 1.0:
            raise ValueError(f"value must be in (0, 1], got {self.value}")


def threshold_for_rate(scores: list[float], rate: float) -> float:
    """Largest threshold with at least `rate` of the scores >= it: the k-th largest score, k = ceil(rate * n)."""
    if not scores:
        raise ValueError("no scores to calibrate on")
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    k = max(1, math.ceil(rate * len(scores) - 1e-9))
    return sorted(scores, reverse=True)[k - 1]


def threshold_for_hard_recall(scores: list[float], labels: list[str], recall: float) -> float:
    """Largest threshold that escalates at least `recall` of the ESCALATE-labeled records."""
    hard = [s for s, label in zip(scores, labels, strict=True) if label == "ESCALATE"]
    if not hard:
        raise ValueError("no ESCALATE-labeled records: hard-recall is undefined on this split")
    return threshold_for_rate(hard, recall)


def summarize(scores: list[float], labels: list[str], threshold: float) -> dict[str, Any]:
    escalate = [s >= threshold for s in scores]
    hard = [e for e, label in zip(escalate, labels, strict=True) if label == "ESCALATE"]
    agree = [e == (label == "ESCALATE") for e, label in zip(escalate, labels, strict=True)]
    return {
        "n": len(scores),
        "escalation_rate": sum(escalate) / len(scores),
        "hard_recall": sum(hard) / len(hard) if hard else None,
        "label_accuracy": sum(agree) / len(agree),
        "label_escalate_share": sum(label == "ESCALATE" for label in labels) / len(labels),
    }


def calibrate(scores: list[float], labels: list[str], target: str, value: float) -> dict[str, Any]:
    if target == "escalation_rate":
        threshold = threshold_for_rate(scores, value)
    elif target == "hard_recall":
        threshold = threshold_for_hard_recall(scores, labels, value)
    else:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    return {"threshold": threshold, "target": {"kind": target, "value": value},
            "achieved": summarize(scores, labels, threshold)}


def load_labeled(data: str, split: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Records with a label (ANSWER/ESCALATE) from a saved DatasetDict or a JSONL file."""
    from labeling.dataset import load_split

    path = Path(data)
    rows = load_split(path, split)
    out = []
    for i, row in enumerate(rows):
        for key in ("question", "router_summaries", "label"):
            if key not in row:
                raise ValueError(f"{path} [{split}] record {i}: missing field {key!r}")
        if row["label"] in ("ANSWER", "ESCALATE"):
            out.append(row)
    if not out:
        raise ValueError(f"{path} [{split}]: no labeled records to calibrate on")
    return out[:limit] if limit else out


def run(cfg: CalibrateConfig) -> dict[str, Any]:
    from serving.router import LocalRouter

    records = load_labeled(cfg.data, cfg.split, cfg.limit)
    router = LocalRouter.from_pretrained(cfg.router, mode="fast", batch_size=cfg.batch_size)
    from tqdm import tqdm

    scores: list[float] = []
    for i in tqdm(range(0, len(records), cfg.batch_size), desc="calibrate: scoring", unit="batch"):
        chunk = records[i: i + cfg.batch_size]
        scores += router.score([r["question"] for r in chunk], [r["router_summaries"] for r in chunk])
    labels = [r["label"] for r in records]
    result = calibrate(scores, labels, cfg.target, cfg.value)
    result.update({"data": cfg.data, "split": cfg.split, "scored_by": "fast path p_escalate"})
    if cfg.write:
        if not Path(cfg.router).is_dir():
            raise FileNotFoundError(f"{cfg.router}: calibration is stored in a local run directory")
        update_run_meta(cfg.router, calibration=result)
        from serving.model_card import refresh_card

        refresh_card(cfg.router)  # the run's README.md shows the stored threshold
    return result


def main(argv: list[str] | None = None) -> int:
    from tiermem.config import ConfigError, parse_cli

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_cli(CalibrateConfig, argv, default_config=None)
        result = run(cfg)
    except (ConfigError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"calibrate: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
