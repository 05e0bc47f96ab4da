"""Synthetic questions and summaries the feature router can learn, and a label dataset built from them."""

import random

from tests.helpers.records import rec


def _synthetic(n, seed):
    """Questions whose answer is in the summaries (high retrieval score, overlapping words) are ANSWER."""
    rng = random.Random(seed)
    qs, ss, ys = [], [], []
    for _ in range(n):
        escalate = rng.random() < 0.4
        name = rng.choice(["Caroline", "Melanie", "Jon", "Gina"])
        thing = rng.choice(["painting", "guitar", "marathon", "bakery", "garden"])
        q = f"{rng.choice(['When did', 'What did', 'Where did'])} {name} start the {thing}?"
        top = rng.uniform(0.2, 0.55) if escalate else rng.uniform(0.45, 0.9)
        text = f"{name} talked about the weather." if escalate and rng.random() < 0.7 else f"{name} likes {thing}."
        ss.append([{"text": text, "score": top, "date": None}, {"text": "Other talk.", "score": top - 0.1,
                                                                 "date": None}])
        qs.append(q)
        ys.append(escalate)
    return qs, ss, ys


def _label_dataset(tmp_path):
    from datasets import Dataset, DatasetDict


    splits = {}
    for split, seed, n in (("train", 0, 120), ("validation", 1, 60), ("test", 2, 60)):
        rows = []
        for i, (q, s, y) in enumerate(zip(*_synthetic(n, seed), strict=True)):
            r = rec(f"{split}{i}", f"{split}-c{i % 4}", not y, True, "ESCALATE" if y else "ANSWER", split)
            r.update(question=q, router_summaries=[dict(u, unit_id="u", page_ids=[]) for u in s])
            rows.append(r)
        splits[split] = Dataset.from_list(rows)
    path = tmp_path / "label" / "dataset"
    DatasetDict(splits).save_to_disk(str(path))
    return path
