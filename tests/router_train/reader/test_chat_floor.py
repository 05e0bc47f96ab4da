"""The "not stated" floor calibrated on conversations (issue 40): chat questions read as `ask` reads them, stored
bound to the reader's weights, recalibrated when they change and skipped while they do not."""

import json

import pytest

from router_train.reader.chat_floor import ChatFloorConfig, calibrate_on_chats, conversation_items, main, molweni_items
from tests.helpers.tiny_bert import tiny_bert
from tiermem.models.floors import load_floor, weights_sha256
from tiermem.settings.errors import ConfigError

MOLWENI = {"data": {"title": "t", "dialogues": [
    {"edus": [{"speaker": "ann", "text": "did you mount it with fstab ?"}, {"speaker": "bo", "text": "yes. twice."}],
     "context": "ann: did you mount it with fstab ? bo: yes. twice. ", "relations": [],
     "qas": [{"question": "What did ann reboot?", "id": "1", "answers": [], "is_impossible": True},
             {"question": "How did bo mount it?", "id": "2", "answers": [{"text": "fstab", "answer_start": 27}],
              "is_impossible": False}]}]}}


class StubReader:
    """Logit 2 for a sentence holding a word of the question's last two, else -2."""

    def logits(self, questions, texts):
        return [2.0 if any(w.strip("?").lower() in t.lower() for w in q.split()[-2:]) else -2.0
                for q, t in zip(questions, texts, strict=True)]


def _reader(tmp_path):
    """A tiny reader in a reader-pretrain run directory (its run marker: answer-floor updates only such runs)."""
    from tiermem.runs.rundir import claimed_output_dir

    with claimed_output_dir(tmp_path / "reader", "reader-pretrain") as out:
        tiny_bert(out)
    return tmp_path / "reader"


@pytest.fixture
def molweni(tmp_path):
    path = tmp_path / "molweni.json"
    path.write_text(json.dumps(MOLWENI))
    return path


def _cfg(tmp_path, molweni, **kw):
    return ChatFloorConfig(reader=str(tmp_path / "reader"), data="", conversations=[], molweni=str(molweni), **kw)


def test_items_are_chat_questions_read_as_ask_reads_them(tmp_path, molweni):
    items = conversation_items(_cfg(tmp_path, molweni, turn_k=8))
    assert items and any(a for _, _, a in items) and all(isinstance(t, str) for _, ts, _ in items for t in ts)
    assert all(": " in t for _, ts, _ in items for t in ts)  # `date: speaker: sentence`
    unanswerable = molweni_items(str(molweni), 0, 0)
    assert unanswerable == [("What did ann reboot?", ["ann: did you mount it with fstab ?", "bo: yes. twice."],
                             False)]


def test_the_floor_is_bound_to_the_weights_and_recalibrated_when_they_change(tmp_path, molweni):
    reader_dir = _reader(tmp_path)
    cfg = _cfg(tmp_path, molweni, turn_k=8)
    floor = calibrate_on_chats(cfg, StubReader())
    stored = json.loads((reader_dir / "answer_floor.json").read_text())
    assert stored["reader_weights_sha256"] == weights_sha256(reader_dir) and stored["method"].startswith("chat")
    assert stored["molweni_unanswerable"] == 1 and stored["conversation_questions"] >= 1
    assert load_floor(reader_dir) == floor["floor"]
    assert calibrate_on_chats(cfg, StubReader()).get("current")  # same weights and settings: not redone
    assert not calibrate_on_chats(_cfg(tmp_path, molweni, turn_k=4), StubReader()).get("current")  # settings
    (reader_dir / "model.safetensors").write_bytes((reader_dir / "model.safetensors").read_bytes() + b" ")
    with pytest.raises(ConfigError, match="calibrated for other weights"):
        load_floor(reader_dir)  # a changed reader is never held to the old floor
    assert not calibrate_on_chats(cfg, StubReader()).get("current")
    assert load_floor(reader_dir) == json.loads((reader_dir / "answer_floor.json").read_text())["floor"]


def test_the_stage_runs_with_the_real_loader(tmp_path, molweni, capsys):
    _reader(tmp_path)
    args = [f"reader={tmp_path / 'reader'}", "data=", "conversations=[]", f"molweni={molweni}", "max_questions=6"]
    assert main(args) == 0
    assert '"floor"' in capsys.readouterr().out
    assert main(args) == 0 and "is current" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="turn_k"):
        ChatFloorConfig(turn_k=0)
