"""Round eight (issue 66), labeling: pooled datasets never hold one conversation in two splits; a gold point with no
source turn that comes after its question is `evidence_after_question`."""

import json

import pytest

from labeling.dataset import RecordError, load_dataset_dict, load_split
from labeling.question import late_evidence
from tests.helpers.memory_runtime import build
from tests.helpers.realmem_fixture import write
from tiermem.data.realmem import load_realmem
from tiermem.data.records import GoldPoint, Question


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _rec(conv, qid, split):
    return {"conv_id": conv, "qid": qid, "split": split, "label": "ANSWER", "source": "locomo", "question": "q?",
            "router_summaries": []}


@pytest.mark.parametrize("other_split", ["test", "validation"])
def test_a_conversation_in_train_of_one_pooled_dataset_and_held_out_in_another_is_refused(tmp_path, other_split):
    a = _jsonl(tmp_path / "a.jsonl", [_rec("conv-1", "q1", "train"), _rec("conv-2", "q2", "test")])
    b = _jsonl(tmp_path / "b.jsonl", [_rec("conv-1", "q9", other_split)])
    for split in ("train", "test", "validation"):
        with pytest.raises(RecordError, match=rf"conversation 'conv-1' is in split 'train' of {a} and in split "
                                              rf"'{other_split}' of {b}"):
            load_split([a, b], split)


def test_pooled_dataset_dicts_are_checked_alike(tmp_path):
    from datasets import Dataset, DatasetDict

    def save(name, rows_by_split):
        path = tmp_path / name
        DatasetDict({s: Dataset.from_list(rows) for s, rows in rows_by_split.items()}).save_to_disk(str(path))
        return str(path)

    a = save("a", {"train": [_rec("c1", "q1", "train")], "test": [_rec("c2", "q2", "test")]})
    b = save("b", {"train": [_rec("c3", "q3", "train")], "test": [_rec("c1", "q4", "test")]})
    with pytest.raises(RecordError, match="conversation 'c1' is in split 'train' of .*a and in split 'test' of .*b"):
        load_dataset_dict([a, b])
    with pytest.raises(RecordError, match="conversation 'c1'"):
        load_split([a, b], "train")
    c = save("c", {"train": [_rec("c1", "q5", "train")], "test": [_rec("c4", "q6", "test")]})
    assert len(load_dataset_dict([a, c])["train"]) == 2  # one conversation in the same split of both: fine


def test_a_gold_point_with_no_source_that_comes_after_the_question_is_late(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    memory = build(tmp_path, conv).memory
    point = GoldPoint("User prefers quiet resorts.", [])  # session S2's point with no source: linked to all of S2
    q = Question("Q-x", "Which resorts do I like?", point.text, "c", [], None, asked_before="S2:3", points=[point])
    assert late_evidence(memory.as_of("S2:3"), q, conv) == ["point:User prefers quiet resorts."]
    later = Question("Q-y", "Which resorts?", point.text, "c", [], None, asked_before="S3:1", points=[point])
    assert late_evidence(memory.as_of("S3:1"), later, conv) == []  # said before a question in a later session
