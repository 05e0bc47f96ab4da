"""The records digest in eval's data name names the data, not the run that labeled it."""

import json

from evaluation.provenance import data_name


def _file(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_relabel_that_differs_only_in_wall_times_keeps_the_digest_and_a_changed_label_does_not(tmp_path):
    rec = {"conv_id": "c", "qid": "q1", "label": "ANSWER", "label_wall_s": 0.5, "cost_summary_wall_s": 0.1}
    again = {**rec, "label_wall_s": 0.9, "cost_summary_wall_s": 0.3}
    other = {**rec, "label": "ESCALATE"}
    first = data_name(_file(tmp_path, "a.jsonl", [rec]), [rec], {})
    assert first == data_name(_file(tmp_path, "a.jsonl", [again]), [again], {})
    assert first != data_name(_file(tmp_path, "a.jsonl", [other]), [other], {})
    assert "1 records, sha256 " in first
