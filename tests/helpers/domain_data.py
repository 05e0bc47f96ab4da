"""Two labeled datasets of different domains (their records' `source`), in the label stage's saved shape."""

from tests.helpers.feature_data import _synthetic
from tests.helpers.records import rec


def domain_dataset(tmp_path, domain: str, seed: int, n: int = 60, **extra):
    """A saved DatasetDict of `domain` records: train, validation and test, four conversations each."""
    from datasets import Dataset, DatasetDict

    splits = {}
    for split, offset in (("train", 0), ("validation", 1), ("test", 2)):
        rows = []
        for i, (q, s, y) in enumerate(zip(*_synthetic(n, seed * 10 + offset), strict=True)):
            r = rec(f"{domain}-{split}{i}", f"{domain}-{split}-c{i % 4}", not y, True,
                    "ESCALATE" if y else "ANSWER", split)
            r.update(extra, question=q, source=domain, router_summaries=[dict(u, unit_id="u", page_ids=[]) for u in s])
            rows.append(r)
        splits[split] = Dataset.from_list(rows)
    path = tmp_path / f"label_{domain}" / "dataset"
    DatasetDict(splits).save_to_disk(str(path))
    return path
