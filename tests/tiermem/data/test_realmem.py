import pytest

from tests.helpers.realmem_fixture import GUIDE, MARCH, PASS, edited, history, write
from tiermem.data.conversations import detect_file_format, load_conversations
from tiermem.data.realmem import load_realmem
from tiermem.data.tiermem_format import dump_tiermem, load_tiermem
from tiermem.settings.errors import DataError


def _conv(tmp_path, data=None):
    return load_realmem(write(tmp_path, data))[0]


def test_sessions_are_ordered_by_date_stably_and_turn_ids_say_session_and_position(tmp_path):
    conv = _conv(tmp_path)
    assert conv.conv_id == "Aru_Test"
    # file order B, A, C, D; dates A < B < C == D: C keeps its place before D
    assert [t.session_id for t in conv.turns if t.turn_id.endswith(":1")] == ["aaaa", "bbbb", "cccc", "dddd"]
    assert [t.turn_id for t in conv.turns][:4] == ["S1:1", "S1:2", "S1:3", "S1:4"]
    assert {t.speaker for t in conv.turns} == {"User", "Assistant"}
    assert conv.turns[0].timestamp == "2026-01-05"


def test_a_query_is_a_question_as_of_its_turn_with_the_reply_points_as_gold(tmp_path):
    conv = _conv(tmp_path)
    q1, q2 = conv.questions
    assert (q1.qid, q1.category, q1.asked_before) == ("Q-0001", "Dynamic Incremental", "S2:3")
    assert q1.evidence == ["S1:3"]  # the snapshot's turn (source_turn 3 is 1-based here)
    assert q1.answer == "User booked the Kanas lodge for 9 March, room 12."
    assert q1.tags == {"session_type": "multi_session", "topic": "Travel"}
    assert [p.turn_ids for p in q2.points] == [["S2:1"], ["S4:1"]]  # two facts, one said after the question
    assert q2.answer.splitlines() == ["User's ski guide in Hemu is Aigerim.", "The ski pass costs 480 yuan for 3 days."]


def test_an_off_by_one_source_turn_and_a_point_with_no_source_are_matched_and_counted(tmp_path):
    conv = _conv(tmp_path)
    units = {u.text: u for u in conv.summaries}
    assert units["User's ski guide in Hemu is Aigerim."].turn_ids == ["S2:1"]  # source_turn 0: snapshot decides
    quiet = units["User prefers quiet resorts."]
    assert quiet.turn_ids == ["S2:1", "S2:2", "S2:3", "S2:4"]  # no turn says it: its whole session, read at its end
    assert conv.load_notes == {"points_by_session_end": 1, "points_by_snapshot": 3}
    # a snapshot no turn has: the turn of the point's role that states it
    data = edited(lambda d: d["dialogues"][1]["extracted_memory"][0].update(source_content_snapshot="edited"))
    conv = _conv(tmp_path, data)
    assert conv.summaries[0].turn_ids == ["S1:3"] and conv.load_notes["points_by_content"] == 1


def _chosen_later(d):
    """Session A: the user chooses the lodge only after a request; its point carries the session's first turn as
    snapshot under the other speaker's role (as ~11% of RealMem's points do)."""
    a = d["dialogues"][1]
    a["dialogue_turns"][1:1] = [
        {"speaker": "User", "is_query": True, "content": "Which lodge should I pick near Kanas?", "query_id": "Q-0009",
         "category_name": "Dynamic Updating", "session_type": "single_session", "topic": "Travel"},
        {"speaker": "Assistant", "is_query": False, "content": "Either the Kanas lodge or the Hemu inn.",
         "query_id": None, "memory_used": [{"session_uuid": "aaaa", "content": "User prefers quiet resorts."}]}]
    a["dialogue_turns"] += [{"speaker": "User", "is_query": False, "query_id": None,
                             "content": "I have chosen the Kanas lodge, decided."},
                            {"speaker": "Assistant", "is_query": False, "query_id": None,
                             "content": "Great, the Kanas lodge is chosen."}]
    a["extracted_memory"].append({"index": "Travel_1-DM-S1_01-02", "type": "Dynamic", "session_uuid": "aaaa",
                                  "content": "User has chosen the Kanas lodge.", "source_turn": 1,
                                  "source_content_snapshot": a["dialogue_turns"][0]["content"],
                                  "source_role_snapshot": "Assistant"})


def test_a_point_is_never_read_before_the_turn_that_says_it(tmp_path):
    conv = _conv(tmp_path, edited(_chosen_later))
    chosen = next(u for u in conv.summaries if u.text == "User has chosen the Kanas lodge.")
    # the Assistant's turn that says it (the point's role), not the snapshot's first turn of the other speaker
    assert chosen.turn_ids == ["S1:8"]
    assert conv.load_notes["points_by_content"] == 1
    # a snapshot of the right speaker that says less than later turns: read at the first turn that says it fully
    def early_snapshot(d):
        _chosen_later(d)
        d["dialogues"][1]["extracted_memory"][1]["source_role_snapshot"] = "User"
    conv = _conv(tmp_path, edited(early_snapshot))
    assert next(u for u in conv.summaries if u.text == "User has chosen the Kanas lodge.").turn_ids == ["S1:7"]


def test_a_used_point_with_no_source_has_no_gold_turn_and_is_counted(tmp_path):
    def edit(d):
        d["dialogues"][2]["dialogue_turns"][1]["memory_used"] = [
            {"session_uuid": "bbbb", "content": "User prefers quiet resorts."}]
    conv = _conv(tmp_path, edited(edit))
    q2 = conv.questions[1]
    assert q2.evidence == [] and q2.points[0].turn_ids == [] and conv.load_notes["used_points_no_source"] == 1


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d["dialogues"][0].pop("current_time"), "session 'bbbb' (dialogues[0]): missing field 'current_time'"),
    (lambda d: d["dialogues"][0].update(current_time="next Tuesday"), "field 'current_time' is 'next Tuesday'"),
    (lambda d: d["dialogues"][1]["dialogue_turns"][0].update(speaker="Bot"), "field 'speaker' is 'Bot'"),
    (lambda d: d["dialogues"][0]["dialogue_turns"][3].pop("memory_used"), "missing field 'memory_used'"),
    (lambda d: d["dialogues"][0]["dialogue_turns"].pop(), "must be followed by the Assistant's reply"),
    (lambda d: d["dialogues"][1]["extracted_memory"][0].update(source_turn="3"), "field 'source_turn' must be"),
    (lambda d: d["dialogues"][3].update(session_uuid="aaaa"), "field 'session_uuid' repeats"),
    (lambda d: d.pop("_metadata"), "field '_metadata'"),
])
def test_a_malformed_file_is_one_error_naming_file_session_and_field(tmp_path, edit, needle):
    path = write(tmp_path, edited(edit))
    with pytest.raises(DataError) as err:
        load_conversations(path if needle != "field '_metadata'" else path, "realmem")
    assert str(path) in str(err.value) and needle in str(err.value)


def test_a_directory_or_a_file_loads_through_the_one_interface(tmp_path):
    write(tmp_path / "rm")
    write(tmp_path / "rm", name="Bea_Test_dialogues_256k.json",
          data=edited(lambda d: d["_metadata"].update(person_name="Bea_Test")))
    assert detect_file_format(tmp_path / "rm") == "realmem"
    assert [c.conv_id for c in load_conversations(tmp_path / "rm")] == ["Aru_Test", "Bea_Test"]
    assert [c.conv_id for c in load_conversations(tmp_path / "rm" / "Aru_Test_dialogues_256k.json")] == ["Aru_Test"]
    with pytest.raises(DataError, match="no RealMem history"):
        load_conversations(tmp_path)


def test_the_tiermem_format_carries_asked_after_and_summaries(tmp_path):
    conv = _conv(tmp_path)
    path = dump_tiermem([conv], tmp_path / "own.json")
    back = load_tiermem(path)[0]
    assert [q.asked_before for q in back.questions] == [q.asked_before for q in conv.questions]
    assert [(u.unit_id, u.turn_ids) for u in back.summaries] == [(u.unit_id, u.turn_ids) for u in conv.summaries]
    text = path.read_text().replace('"S1:3"', '"S9:9"', 1)  # a source turn no turn has
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(DataError, match="unknown turn id"):
        load_tiermem(tmp_path / "bad.json")


def test_fixture_texts_are_where_the_tests_say(tmp_path):
    texts = {t.turn_id: t.text for t in _conv(tmp_path).turns}
    assert (texts["S1:3"], texts["S2:1"], texts["S4:1"]) == (MARCH, GUIDE, PASS)
    assert len(history()["dialogues"]) == 4


@pytest.mark.parametrize("where", ["realmem", "tiermem", "locomo"])
def test_a_lone_surrogate_in_a_data_file_is_a_named_error(tmp_path, where):
    import json

    if where == "realmem":
        data = edited(lambda d: d["dialogues"][1]["dialogue_turns"][0].update(content="guide \ud800 Aigerim"))
        path, field = write(tmp_path, data), "dialogues[1].dialogue_turns[0].content"
    elif where == "tiermem":
        data = {"format": "tiermem-conversations", "version": 1, "conversations": [{"id": "c", "turns": [
            {"id": "t1", "session": "s", "timestamp": "2024-01-01", "speaker": "u", "text": "a \udc80 b"}]}]}
        path, field = tmp_path / "own.json", "conversations[0].turns[0].text"
        path.write_text(json.dumps(data))
    else:
        data = [{"sample_id": "x", "conversation": {"speaker_a": "A\ud800", "speaker_b": "B"}, "qa": []}]
        path, field = tmp_path / "locomo.json", "[0].conversation.speaker_a"
        path.write_text(json.dumps(data))
    with pytest.raises(DataError) as err:
        load_conversations(path)
    assert str(path) in str(err.value) and field in str(err.value) and "lone surrogate" in str(err.value)
