"""The unit reader reads a record's `teacher` field through one checked reader: a field that is no JSON object of a
teacher's decision (no action, a confidence that is no integer 1..5, parsed_ok that is no boolean) is a named
error for the record and field before any training, never a traceback nor a target outside [0, 1]."""

from __future__ import annotations

import json

import pytest

from labeling.dataset import RecordError
from router_train.reader.targets import head_targets
from router_train.reader.unit_inputs import natural_records

BAD = [
    ("{not json", "is not JSON"),
    (json.dumps(["ANSWER", 5]), "must hold a JSON object"),
    (json.dumps({"confidence": 4}), "'action' must be one of"),
    (json.dumps({"action": "ESCALATE", "confidence": "high"}), "'confidence' must be an integer 1..5"),
    (json.dumps({"action": "ESCALATE", "confidence": 10}), "'confidence' must be an integer 1..5"),
    (json.dumps({"action": "ANSWER", "confidence": True}), "'confidence' must be an integer 1..5"),
    (json.dumps({"action": "ANSWER", "confidence": 3, "parsed_ok": "yes"}), "'parsed_ok' must be true or false"),
    (7, "must be a JSON string or null"),
]


def _rows(teacher):
    rows = []
    for i in range(4):
        unit = {"unit_id": f"u{i}", "text": f"Bo: went to Town {i}", "date": None, "rank": 1, "s_ok": True,
                "answer_recall": 1.0}
        rows.append({"conv_id": f"k{i % 2}", "qid": f"p{i}", "question": f"Where did Bo go {i}?", "split": "train",
                     "router_summaries": [{"text": unit["text"], "date": None, "score": 0.5}], "label": "ESCALATE",
                     "unit_targets": [unit], "teacher": None})
    rows[2]["teacher"] = teacher
    return rows


@pytest.mark.parametrize("teacher, needle", BAD)
def test_a_malformed_teacher_field_is_named_before_any_training(tmp_path, teacher, needle):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(teacher)))
    with pytest.raises(RecordError, match="record 2") as err:
        natural_records(str(path), "train")
    assert "field 'teacher'" in str(err.value) and needle in str(err.value)
    with pytest.raises(RecordError, match=f"record 2 .qid='p2'.: field 'teacher'.*{needle}"):
        head_targets(_rows(teacher), "teacher")


def test_recorded_decisions_are_targets_in_0_1_and_the_rest_the_label():
    rows = _rows(json.dumps({"action": "ANSWER", "confidence": 5, "parsed_ok": True}))
    rows[0]["teacher"] = json.dumps({"action": "ESCALATE", "confidence": None, "parsed_ok": True})  # a live teacher
    rows[1]["teacher"] = json.dumps({"action": "ANSWER", "confidence": 2, "parsed_ok": False})  # unread: the label
    assert head_targets(rows, "teacher") == pytest.approx([1.0, 1.0, 0.05, 1.0])
    assert head_targets(rows, "label") == [1.0] * 4
