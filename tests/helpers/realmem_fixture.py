"""A small RealMem-shaped history (`<Person>_dialogues_*.json`): sessions out of date order, a memory point whose
`source_turn` is 0-based (the file's usual is 1-based), one with no source, a query whose point comes after it."""

import copy
import json


def _turn(speaker, content, query=None, used=None):
    turn = {"speaker": speaker, "is_query": query is not None, "content": content, "query_id": None}
    if query is not None:
        turn.update(query_id=query[0], category_name=query[1], session_type="multi_session", topic="Travel")
    if used is not None:
        turn["memory_used"] = used
        turn["memory_session_uuids"] = sorted({u["session_uuid"] for u in used})
    return turn


def _point(uuid, n, content, source_turn, snapshot, role="User"):
    return {"index": f"Travel_1-DM-S1_0{n}-01", "type": "Dynamic", "content": content, "source_turn": source_turn,
            "source_content_snapshot": snapshot, "source_role_snapshot": role, "session_uuid": uuid}


MARCH = "I booked the Kanas lodge for the ninth of March, room 12."
GUIDE = "My ski guide in Hemu is called Aigerim."
PASS = "The ski pass costs 480 yuan for three days."


def history():
    """Sessions in the file: B (Jan 10), A (Jan 05), C (Jan 20), D (Jan 20). Sorted: A=S1, B=S2, C=S3, D=S4."""
    a = {"session_identifier": "Travel_1:S1_01", "session_uuid": "aaaa", "current_time": "2026-01-05 (Monday)",
         "dialogue_turns": [_turn("User", "Hello, planning a ski trip to Altay."),
                            _turn("Assistant", "Happy to help with the Altay trip."),
                            _turn("User", MARCH),
                            _turn("Assistant", "Noted, the Kanas lodge on 9 March.")],
         "extracted_memory": [_point("aaaa", 1, "User booked the Kanas lodge for 9 March, room 12.", 3, MARCH)]}
    b = {"session_identifier": "Travel_1:S1_02", "session_uuid": "bbbb", "current_time": "2026-01-10 (Saturday)",
         "dialogue_turns": [_turn("User", GUIDE),
                            _turn("Assistant", "Aigerim, noted as your Hemu guide."),
                            _turn("User", "Which room did I book at the lodge?",
                                  query=("Q-0001", "Dynamic Incremental")),
                            _turn("Assistant", "Room 12 at the Kanas lodge.", used=[
                                {"session_uuid": "aaaa", "content": "User booked the Kanas lodge for 9 March, "
                                                                   "room 12."}])],
         # 0-based source_turn (the file's usual is 1-based): the snapshot decides
         "extracted_memory": [_point("bbbb", 1, "User's ski guide in Hemu is Aigerim.", 0, GUIDE),
                              # no source at all
                              _point("bbbb", 2, "User prefers quiet resorts.", -1, "", role="Assistant")]}
    c = {"session_identifier": "Travel_1:S1_03", "session_uuid": "cccc", "current_time": "2026-01-20 (Tuesday)",
         "dialogue_turns": [_turn("User", "How much is the pass, and who is my guide?",
                                  query=("Q-0002", "Implicit Preference")),
                            _turn("Assistant", "Your guide is Aigerim; the pass price I do not have yet.", used=[
                                {"session_uuid": "bbbb", "content": "User's ski guide in Hemu is Aigerim."},
                                {"session_uuid": "dddd", "content": "The ski pass costs 480 yuan for 3 days."}]),
                            _turn("User", "Thanks.")],
         "extracted_memory": []}
    d = {"session_identifier": "Travel_1:S1_04", "session_uuid": "dddd", "current_time": "2026-01-20 (Tuesday)",
         "dialogue_turns": [_turn("User", PASS), _turn("Assistant", "480 yuan for three days, noted.")],
         "extracted_memory": [_point("dddd", 1, "The ski pass costs 480 yuan for 3 days.", 1, PASS)]}
    return {"_metadata": {"person_name": "Aru_Test", "total_sessions": 4, "total_tokens": 300},
            "dialogues": [b, a, c, d]}


def write(directory, data=None, name="Aru_Test_dialogues_256k.json"):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(history() if data is None else data), encoding="utf-8")
    return path


def edited(edit):
    data = copy.deepcopy(history())
    edit(data)
    return data
