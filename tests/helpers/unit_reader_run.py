"""A unit-reader router made in seconds without its stage: a tiny random BERT cross-encoder (the packaged MiniLM
tokenizer, 2 layers of width 32) and a logistic head fitted on the signals of a few invented requests, saved with
UnitReaderRouter.save as the stage saves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.tiny_bert import tiny_bert

QUESTIONS = ["What does Caroline like?", "When did Jon open the bakery?", "Where does Gina paint?",
             "Who adopted Pepper?", "What did Melanie bake?", "When did Tomas move?"]


def requests(n: int = 12) -> tuple[list[str], list[list[dict[str, Any]]], list[int]]:
    """Questions, their summaries (with retrieval scores) and ESCALATE labels: high scores answer."""
    questions, summaries, labels = [], [], []
    for i in range(n):
        escalate = i % 2
        top = 0.35 + 0.05 * (i % 3) if escalate else 0.75 + 0.05 * (i % 3)
        questions.append(QUESTIONS[i % len(QUESTIONS)])
        summaries.append([{"text": f"{QUESTIONS[i % len(QUESTIONS)].split()[2]} talked about day {i}.",
                           "date": "2023-05-08", "score": top},
                          {"text": "Other talk.", "date": None, "score": top - 0.2}])
        labels.append(escalate)
    return questions, summaries, labels


def tiny_unit_reader(model_dir: Path, pooling: str = "max", text_weight: float = 1.0):
    """The router in memory (not saved)."""
    import numpy as np

    from serving.routers.unit_reader import POOLINGS, CrossEncoder, UnitReaderRouter, head_matrix, unit_logits
    from serving.signals import FEATURES
    from tiermem.models.logistic import fit_logistic

    reader = CrossEncoder.load(tiny_bert(model_dir), batch_size=16)
    questions, summaries, labels = requests()
    x = head_matrix(questions, summaries, unit_logits(reader, questions, summaries), pooling)
    head = fit_logistic(x, np.array(labels), [*FEATURES, *POOLINGS[pooling]], 1.0)
    return UnitReaderRouter(reader, head, pooling, text_weight)


def unit_reader_run(root: Path, data: str = "runs/label/dataset") -> Path:
    """A saved unit-reader run directory under `root` (`reader/`), its run marker included, as the stage leaves it."""
    from tiermem.runs.rundir import claimed_output_dir

    router = tiny_unit_reader(root / "tiny-bert")
    with claimed_output_dir(root / "reader", "unit-reader") as out:
        router.save(out, data={"dataset": data, "train_split": "train", "train_records": 12},
                    metrics={"validation": {"n": 12, "auroc": 0.75}},
                    extra={"reader_base": "packaged:all-minilm-l6-v2", "config": {"score_batch_size": 16}})
    return root / "reader"
