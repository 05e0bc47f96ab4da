"""A lone surrogate (JSON's "\\ud800" escape: no Unicode character) in a judgments file is a named error for its line
and field when the file is read, by every reader: label, eval and the recorded-teacher router serve builds."""

from __future__ import annotations

import json

import pytest

from labeling.dataset import RecordError
from labeling.judgments.format import load_judgments
from serving.routers.spec import RouterSpec, build
from tests.labeling.test_judgments import judgment, write


@pytest.mark.parametrize("field, edit", [
    ("question", lambda r: r.update(question="When \ud800?")),
    ("reason", lambda r: r.update(reason="half \udfff")),
    ("span", lambda r: r["units"][0].update(span="a\ud83d")),
    ("thinking", lambda r: r["teacher"].update(thinking="\udc80")),
    ("unit_id", lambda r: r["units"][1].update(unit_id="u\ud800")),
])
def test_a_lone_surrogate_in_a_judgments_file_names_its_line_and_field(tmp_path, field, edit):
    row = judgment("c1", "q1", "When?", ["a", "b"], ["yes", "no"], "yes", ["a", None])
    edit(row)
    path = write(tmp_path / "j.jsonl", [row])  # json.dumps writes the escape: the file itself is ASCII
    # the field is named by its path in the line ('units[0].span', 'teacher.thinking')
    with pytest.raises(RecordError, match=rf"j.jsonl: line 2.*field '([^']*\.)?{field}' holds a lone surrogate"):
        load_judgments(path)
    with pytest.raises(RecordError, match=rf"field '([^']*\.)?{field}' holds a lone surrogate"):
        build(RouterSpec(kind="recorded-teacher", path=str(path), name="teacher"))


def test_eval_refuses_the_file_before_any_router_is_asked(tmp_path):
    from evaluation import evaluate as E
    from tests.helpers.router_fixtures import build_label_dataset

    row = judgment("c4", "c4-q10", "When?", ["a"], ["yes"], "yes")
    row["reason"] = "\ud800"
    path = write(tmp_path / "j.jsonl", [row])
    build_label_dataset(tmp_path / "dataset")
    cfg = E.EvalConfig(data=str(tmp_path / "dataset"), output_dir=str(tmp_path / "eval"), judgments=str(path),
                       router=E.as_router_spec("always-escalate"))
    with pytest.raises(RecordError, match="field 'reason' holds a lone surrogate"):
        E.run(cfg)
    assert not (tmp_path / "eval" / "eval.json").exists()
    assert json.loads(path.read_text().splitlines()[1])["reason"] == "\ud800"  # the file is left as it is
