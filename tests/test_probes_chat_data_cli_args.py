"""Probe table (docs/probes.md), the inputs: chat data read by one reader per format and checked
like SQuAD before any training, FriendsQA speaker answers as given, `ask` / `demo` / `serve` arguments that were
dropped or accepted silently. The readers themselves: tests/test_probes_reader_loading.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.helpers.tiny_bert import tiny_bert

FIXTURES = Path(__file__).parent / "helpers" / "fixtures" / "reading"
MOLWENI, FRIENDS, SQUAD = (FIXTURES / n for n in ("molweni_small.json", "friendsqa_small.json", "squad2_small.json"))


def _write(tmp_path: Path, name: str, doc) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def _friends(change) -> dict:
    doc = json.loads(FRIENDS.read_text())
    change(doc)
    return doc


def _molweni(change) -> dict:
    doc = json.loads(MOLWENI.read_text())
    change(doc)
    return doc


def _answer(doc, **set_):
    doc["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].update(set_)  # f2: a speaker answer of utterance 1


def _utterance(doc, **set_):
    doc["data"][0]["paragraphs"][0]["utterances:"][1].update(set_)


# ---- 3: FriendsQA speaker answers are read as given, never invented ----------------------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda d: _utterance(d, speakers=[]), "'speakers' must be a non-empty list of names"),
    (lambda d: _answer(d, answer_text="Chandler Bing"), "'Chandler Bing' is no speaker of utterance 1"),
    (lambda d: _answer(d, is_speaker="false"), "'is_speaker' must be true or false"),
    (lambda d: _utterance(d, speakers={"name": "Joey"}), "field 'speakers' must be list"),
    (lambda d: _utterance(d, speakers=None), "field 'speakers' must be list"),
    (lambda d: _utterance(d, speakers=["Joey", ""]), "'speakers' must be a non-empty list of names"),
])
def test_a_friendsqa_speaker_answer_is_the_speakers_own_name_else_a_named_error(change, message, tmp_path):
    from router_train.reader.chat_reading import load_friendsqa
    from tiermem.settings.errors import DataError

    with pytest.raises(DataError, match=r"friends\.json data\[0\] \(s01_e01_c01\) paragraphs\[0\]") as got:
        load_friendsqa(_write(tmp_path, "friends.json", _friends(change)))
    assert message in str(got.value)


def test_a_speaker_answer_of_two_speakers_points_at_the_one_named(tmp_path):
    from router_train.reader.chat_reading import load_friendsqa

    def two(doc):
        doc["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].update(answer_text="Chandler Bing", utterance_id=2)

    q = next(q for q in load_friendsqa(_write(tmp_path, "f.json", _friends(two))) if q.qid == "f2")
    (start, text), = q.answers
    assert text == "Chandler Bing" and q.context[start: start + len(text)] == "Chandler Bing"


# ---- 4: a chat source with no question, listed twice, repeated ids and scenes -------------------------------------

def _second_paragraph(doc):
    scene = doc["data"][0]
    para = copy.deepcopy(scene["paragraphs"][0])
    for qa in para["qas"]:
        qa["id"] += "-p2"
    scene["paragraphs"].append(para)


def test_every_friendsqa_paragraph_is_read(tmp_path):
    from router_train.reader.chat_reading import load_friendsqa

    qs = load_friendsqa(_write(tmp_path, "f.json", _friends(_second_paragraph)))
    assert {q.qid for q in qs} >= {"f1", "f1-p2", "f3-p2"} and len(qs) == 8
    assert len({q.article for q in qs if q.qid.startswith("f1")}) == 1  # one scene, held out whole


def _same_title(doc):
    doc["data"][1]["title"] = doc["data"][0]["title"]


def _repeated_id(doc):
    doc["data"][1]["paragraphs"][0]["qas"][0]["id"] = "f1"


def _molweni_repeated_id(doc):
    doc["data"]["dialogues"][1]["qas"][0]["id"] = "m1"


@pytest.mark.parametrize("loader, doc, message", [
    ("load_friendsqa", lambda: _friends(_same_title), "title 's01_e01_c01' repeats"),
    ("load_friendsqa", lambda: _friends(_repeated_id), "question id 'f1' repeats"),
    ("load_molweni", lambda: _molweni(_molweni_repeated_id), "question id 'm1' repeats"),
    ("load_molweni", lambda: {"data": {"dialogues": [{"edus": [], "context": "", "qas": []}]}}, "'edus' is empty"),
    ("load_molweni", lambda: {"data": {"dialogues": [{"edus": [{"speaker": "a", "text": "hi"}], "context": "",
                                                      "qas": []}]}}, "is not in the dialogue's context"),
    ("load_molweni", lambda: {"data": {"dialogues": [{"edus": [{"speaker": "a", "text": "hi"}],
                                                      "context": "a: hi ", "qas": [[1]]}]}}, "missing field"),
])
def test_repeated_ids_titles_and_empty_dialogues_are_named(loader, doc, message, tmp_path):
    from router_train.reader import chat_reading
    from tiermem.settings.errors import DataError

    with pytest.raises(DataError, match="chat.json") as got:
        getattr(chat_reading, loader)(_write(tmp_path, "chat.json", doc()))
    assert message in str(got.value)


def test_a_lower_casing_that_lengthens_a_turn_is_mapped_not_refused(tmp_path):
    from router_train.reader.chat_reading import load_molweni

    line = "İstanbul has a new ferry at the pier"
    doc = {"data": {"dialogues": [{"edus": [{"speaker": "Ali", "text": line}],
                                   "context": f"ali: {line.lower()} ", "qas": [
                                       {"id": "x", "question": "Where is the ferry?", "is_impossible": False,
                                        "answers": [{"text": "at the pier",
                                                     "answer_start": f"ali: {line.lower()}".index("at the pier")}]}]}]}}
    (q,) = load_molweni(_write(tmp_path, "m.json", doc))
    (start, text), = q.answers
    assert text == "at the pier" and q.context[start: start + len(text)] == "at the pier"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("tiny") / "bert")


def _pretrain(base, tmp_path, monkeypatch, chat: list[str], *extra) -> int:
    from router_train.reader.pretrain import main

    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    return main([f"data={SQUAD}", f"base={base}", "heldout_articles=1", "heldout_dialogues=1", "epochs=1",
                 "batch_size=8", "log_every=0", f"chat_data=[{','.join(chat)}]", f"output_dir={tmp_path / 'out'}",
                 *extra])


def _surrogate_molweni(doc):
    doc["data"]["dialogues"][0]["qas"][0]["question"] = "Where did \ud800 Mia meet Sam ?"


def _surrogate_friends(doc):
    doc["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Who \ud800 does Monica work with ?"


@pytest.mark.parametrize("sources, message, code", [
    (lambda t: [f"molweni:{_write(t, 'm.json', {'data': {'dialogues': []}})}"], "no questions", 3),
    (lambda t: [f"molweni:{MOLWENI}", f"molweni:{MOLWENI}"], "lists", 2),
    (lambda t: [f"molweni:{MOLWENI}", f"molweni:{FIXTURES / '..' / 'reading' / MOLWENI.name}"], "lists", 2),
    (lambda t: [f"friendsqa:{FRIENDS}", f"friendsqa:{_write(t, 'f2.json', FRIENDS.read_text())}"],
     "is also in", 3),
    (lambda t: [f"molweni:{_write(t, 'm.json', _molweni(_surrogate_molweni))}"], "lone surrogate", 3),
    (lambda t: [f"friendsqa:{_write(t, 'f.json', _friends(_surrogate_friends))}"], "lone surrogate", 3),
])
def test_chat_sources_are_checked_like_squad_before_any_training(sources, message, code, base, tmp_path,
                                                                   monkeypatch, capsys):
    assert _pretrain(base, tmp_path, monkeypatch, sources(tmp_path), "max_train_pairs=4") == code
    err = capsys.readouterr().err
    assert message in err and "epoch" not in err and "Traceback" not in err, err
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_two_molweni_files_keep_their_dialogues_apart(tmp_path):
    from router_train.reader.chat_reading import load_chat_sources

    def other_ids(doc):
        for d in doc["data"]["dialogues"]:
            for qa in d["qas"]:
                qa["id"] += "-b"

    second = _write(tmp_path, "m2.json", _molweni(other_ids))
    questions, shas = load_chat_sources([f"molweni:{MOLWENI}", f"molweni:{second}"])
    assert len(questions) == 10 and len({q.article for q in questions}) == 4 and len(shas) == 2


# ---- 8: answer-floor reads Molweni with reader-pretrain's reader ------------------------------------------------

@pytest.mark.parametrize("text, message", [
    (json.dumps({"data": {"dialogues": [{"edus": [{"speaker": "a", "text": "hi"}], "context": "a: hi ",
                                         "qas": [[1]]}]}}), "missing field 'question'"),
    ('{"data": ' * 100_000 + "1" + "}" * 100_000, "RecursionError"),
])
def test_answer_floor_reads_molweni_with_the_one_molweni_reader(text, message, base, tmp_path, capsys):
    import shutil

    from router_train.reader.chat_floor import main as chat_floor_main
    from tiermem.runs.rundir import claimed_output_dir

    with claimed_output_dir(tmp_path / "reader", "reader-pretrain") as out:
        for f in base.iterdir():
            shutil.copy(f, out / f.name)
    molweni = _write(tmp_path, "molweni.json", text)
    assert chat_floor_main([f"reader={tmp_path / 'reader'}", "data=", "conversations=[]", f"molweni={molweni}",
                            "max_questions=4"]) == 3
    err = capsys.readouterr().err
    assert "DataError" in err and "molweni.json" in err and message in err and "Traceback" not in err


# ---- 6, 9: ask's questions; demo's stages -------------------------------------------------------------------------

def _ask(tmp_path, *args) -> int:
    from tiermem_cli import cli

    return cli.main(["ask", f"workdir={tmp_path / 'mem'}", "memory.fixed_policy=summary", *args])


def test_ask_with_a_questions_file_and_question_items_is_a_usage_error(tmp_path, capsys):
    questions = _write(tmp_path, "q.txt", "q1\nq2\nq3\n")
    assert _ask(tmp_path, "question=q1", f"questions={questions}") == 2
    assert "both given" in capsys.readouterr().err


@pytest.mark.parametrize("data, offset", [(b"q1\nQu\xe9?\n", 5), (b"\x00\x01\xfe\xff binary", 2)])
def test_a_questions_file_that_is_not_utf8_names_the_file_and_byte_offset(data, offset, tmp_path, capsys):
    path = tmp_path / "q.txt"
    path.write_bytes(data)
    assert _ask(tmp_path, f"questions={path}") == 3
    err = capsys.readouterr().err
    assert "DataError" in err and str(path) in err and f"byte offset {offset}" in err and "Traceback" not in err


def test_a_bom_is_not_part_of_the_first_question_and_the_file_has_a_cap(tmp_path, monkeypatch):
    from tiermem.settings.errors import UsageError
    from tiermem_cli import ingest

    path = tmp_path / "q.txt"
    path.write_bytes(b"\xef\xbb\xbfq1\nq2\n")
    assert ingest.questions_of(ingest.IngestConfig(questions=str(path))) == ["q1", "q2"]
    monkeypatch.setattr(ingest, "MAX_QUESTIONS", 1)
    with pytest.raises(UsageError, match="2 questions; at most 1"):
        ingest.questions_of(ingest.IngestConfig(questions=str(path)))


@pytest.mark.parametrize("stages, message", [
    ("[]", "stages is empty"), ("[label,label,eval,label]", "['label'] listed more than once")])
def test_demo_stages_empty_or_repeated_are_usage_errors(stages, message, tmp_path, capsys):
    from tiermem_cli import cli

    assert cli.main(["demo", f"root={tmp_path / 'runs'}", f"stages={stages}"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs" / "demo_timings.json").exists()


# ---- 10: serve checks /ask's reader at start ----------------------------------------------------------------------

def test_serve_checks_the_ask_reader_and_its_floor_at_start(base, tmp_path, monkeypatch, capsys):
    import uvicorn

    from serving.server import main as serve_main

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append(a))
    assert serve_main(["router=always-escalate", f"ask.memory.reader={tmp_path / 'missing'}"]) == 2
    assert "no reader there" in capsys.readouterr().err and not started
    assert serve_main(["router=always-escalate", f"ask.memory.reader={base}"]) == 2  # no calibrated floor
    err = capsys.readouterr().err
    assert "no calibrated answer floor" in err and "ask.enabled=false" in err and not started
    assert serve_main(["router=always-escalate", "ask.enabled=false"]) == 0 and len(started) == 1


def test_inline_conversations_keep_at_most_max_inline_tiers_and_never_remove_a_directory_they_did_not_build(
        tmp_path):
    from fastapi.testclient import TestClient

    from serving.ask_api import AskServeConfig
    from serving.routers.fixed import AlwaysEscalate
    from serving.server import ServeConfig, create_app
    from tests.helpers.tiny_bert import tiny_reader
    from tiermem.data.tiermem_format import EXAMPLE_PATH
    from tiermem.memory.memory_config import MemoryConfig

    memory = MemoryConfig(page_tokens=120, tokenizer="whitespace", embedder="hashing", answerer="extractive",
                          reader=str(tiny_reader(tmp_path / "reader")))
    mine = tmp_path / "mem" / "someone-elses-tiers"
    mine.mkdir(parents=True)
    cfg = ServeConfig(ask=AskServeConfig(workdir=str(tmp_path / "mem"), memory=memory, max_inline_tiers=2))
    client = TestClient(create_app(AlwaysEscalate(), cfg))
    doc = json.loads(EXAMPLE_PATH.read_text(encoding="utf-8"))
    conv = {k: v for k, v in doc["conversations"][0].items() if k != "questions"}
    for i in range(4):
        r = client.post("/ask", json={"question": "What breed is Pepper?", "conversation": {**conv, "id": f"c{i}"}})
        assert r.status_code == 200, r.text
    left = sorted(p.name for p in (tmp_path / "mem").iterdir())
    assert len(left) == 3 and "someone-elses-tiers" in left and any(n.startswith("c3-") for n in left), left
    r = client.post("/ask", json={"question": "What breed is Pepper?", "conv_id": "c0"})
    assert r.status_code == 404  # removed, and said so, never served from a deleted directory
