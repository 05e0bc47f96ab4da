"""A request's label from what its reply draws from the memory (labeling/reply_evidence.py), and the labels checked
against careful-reading verdicts (labeling/judgments/verdicts.py)."""

import json

import pytest

from labeling.evidence import EvidenceConfig, Reading, compute_signals
from labeling.judgments.verdicts import REALMEM_FORMAT, agreement, load_verdicts
from labeling.reply_evidence import UNDECIDED, ReplyRuleConfig, held, reply_details, reply_signals
from tiermem.settings.errors import ConfigError

MEMORY = [("User chose the efficient frontier as the next topic.", ("S1:2",)),
          ("User's tent is a Coleman Sundome.", ("S2:1",)), ("User booked three campsites at Lake Tekapo.", ("S3:4",))]
REQUEST = "What should we focus on next in the planning?"
REPLY = "We said we would look at the efficient frontier next, then book the three campsites at Lake Tekapo."


def test_details_are_what_the_reply_takes_from_the_memory_and_the_request_does_not_say():
    details = reply_details(REPLY, REQUEST, MEMORY)
    assert ("effici", "frontier") in {(a[:6], b) for a, b in details}
    assert ("lake", "tekapo") in details and ("three", "campsit") in {(a, b[:7]) for a, b in details}
    assert not any("coleman" in d for d in details)  # in the memory, not in the reply
    asked = reply_details(REPLY, "Shall we look at the efficient frontier?", MEMORY)
    assert not any(a.startswith("effici") for a, _ in asked)  # the request says it: no history needed for it


def test_a_unit_holds_a_detail_said_in_other_words_or_order():
    details = reply_details(REPLY, REQUEST, MEMORY)
    revised = ["At Tekapo (the lake), the user has three campsites booked; the frontier, efficient, comes next."]
    assert held(details, revised) == set(details)
    assert held(details, ["User likes lakes."]) == set()


@pytest.mark.parametrize(("missing", "s_ok"), [(0, True), (1, True), (2, None), (3, None), (4, False), (6, False)])
def test_the_bounds_decide_and_between_them_no_label(missing, s_ok):
    details = frozenset((f"w{i}", f"v{i}") for i in range(6))
    summaries = [f"w{i} v{i}" for i in range(6 - missing)]
    details = {d: frozenset({f"t{i}"}) for i, d in enumerate(sorted(details))}
    signals = reply_signals(details, summaries, [], set(), ReplyRuleConfig())
    assert (signals.n_details, signals.missing_from_summaries, signals.s_ok) == (6, missing, s_ok)
    assert signals.r_ok is (missing <= 1)  # research read nothing: right only where the summaries were
    full = reply_signals(details, summaries, [" ".join(f"w{i} v{i}" for i in range(6))], set(), ReplyRuleConfig())
    assert full.missing_after_research == 0 and full.r_ok
    # research read the source turns of the units that state them: held by provenance, whatever the raw wording
    linked = reply_signals(details, summaries, ["other words"], {f"t{i}" for i in range(6)}, ReplyRuleConfig())
    assert linked.missing_after_research == 0 and linked.r_ok


def test_compute_signals_reads_the_reply_where_the_data_gives_one():
    units = [{"text": MEMORY[1][0], "page_ids": ["p1"], "speakers": ["User"]}]
    reading = Reading(lambda pid: ["t1"], lambda pid: [], None, tuple(MEMORY))
    assert reading.reply_details(REQUEST, REPLY)[("lake", "tekapo")] == {"S3:4"}  # with the turns that state it
    signals = compute_signals("gold", "", ["t1"], units, ["p1"], reading, EvidenceConfig(), "realmem",
                              question=REQUEST, reply=REPLY)
    assert signals.reply is not None and signals.reply.missing_from_summaries >= 4 and signals.s_ok is False
    without = compute_signals("gold", "", ["t1"], units, ["p1"], reading, EvidenceConfig(), "realmem",
                              question=REQUEST)
    assert without.reply is None  # no reply: the gold answer decides, as for LoCoMo


@pytest.mark.parametrize("bounds", [(1, 1), (3, 2), (-1, 4), (1.5, 4), (True, 4)])
def test_bounds_that_cannot_order_a_label_are_refused(bounds):
    with pytest.raises(ConfigError, match="evidence.reply"):
        ReplyRuleConfig(*bounds)


def _verdicts(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in [{"format": REALMEM_FORMAT, "version": 2, "n": len(rows)},
                                                       *rows]) + "\n")
    return path


def _row(qid, texts, sufficient):
    units = [{"unit_id": f"S1:m{i}", "text": t} for i, t in enumerate(texts)]
    return {"person": "Aru", "query_id": qid, "units": units,
            "informed": {"sufficient": sufficient, "needed_history": "a; b"}}


def _record(qid, texts, label, conv="Aru"):
    return {"conv_id": conv, "qid": qid, "question": "q", "label": label, "category": "Dynamic Updating",
            "router_summaries": [{"text": t} for t in texts], "reply_details": 3, "n_points": 1,
            "augmentation": None, "error": None}


def test_labels_agree_with_verdicts_only_over_the_units_read(tmp_path):
    verdicts = load_verdicts([str(_verdicts(tmp_path / "v.jsonl", [_row("Q1", ["a", "b"], True),
                                                                    _row("Q2", ["c"], False),
                                                                    _row("Q3", ["d"], True)]))])
    records = [_record("Q1", ["a", "b"], "ANSWER"), _record("Q2", ["c"], "ANSWER"),
               _record("Q3", ["other units"], "ANSWER"), _record("Q4", ["e"], "ESCALATE"),
               _record("Q5", ["f"], None)]
    result = agreement(records, verdicts, n_boot=50)
    assert (result["n"], result["agree"], result["natural"], result["labeled"]) == (2, 1, 5, 4)
    assert result["by_match"] == {"matched": 2, "no_judgment": 2, "question_differs": 0, "units_differ": 1}
    assert result["agreement"]["estimate"] == 0.5 and result["by_details"] == {"3-5": {"n": 2, "agree": 1}}


@pytest.mark.parametrize(("lines", "needle"), [
    ([{"format": "other"}], "line 1 must be a header"),
    ([{"format": REALMEM_FORMAT, "version": 2}], "line 1 must be a header"),  # a header alone
    ([{"format": REALMEM_FORMAT, "version": 2}, {"person": "A", "query_id": "Q", "units": [], "informed": {}}],
     "line 2: field 'informed': field 'sufficient'"),
    ([{"format": REALMEM_FORMAT, "version": 2}, {"person": "A", "query_id": 7}], "line 2: field 'query_id'"),
])
def test_a_bad_verdicts_file_names_its_line_and_field(tmp_path, lines, needle):
    from labeling.dataset import RecordError

    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(RecordError, match=needle):
        load_verdicts(str(path))


def test_a_label_run_reads_each_reply_and_leaves_a_thin_one_unlabeled(tmp_path):
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run
    from tests.helpers.label_helpers import HashEmbedder
    from tests.helpers.realmem_fixture import edited, write
    from tiermem.settings.config import from_dict

    def longer_reply(d):  # Q-0001's reply also names the guide, which the one retrieved unit does not hold
        d["dialogues"][0]["dialogue_turns"][3]["content"] = "Room 12 at the Kanas lodge; your guide in Hemu is Aigerim."

    def label(name, **reply):
        data = write(tmp_path / name, edited(longer_reply))
        cfg = from_dict(LabelConfig, {
            "data_path": str(data), "output_dir": str(tmp_path / name / "out"), "label_rule": "evidence",
            "memory": {"tokenizer": "whitespace", "page_tokens": 40, "max_rounds": 1, "pages_per_round": 2,
                       "top_k": 1}, "evidence": {"reply": reply}, "generate_answers": False,
            "llm": {"answerer": None}, "split": {"ratios": [1, 0, 0]}})
        run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
        lines = (tmp_path / name / "out" / "all_records.jsonl").read_text().splitlines()
        return next(r for r in map(json.loads, lines) if r["qid"] == "Q-0001")

    thin = label("thin")
    assert [u["text"] for u in thin["router_summaries"]] == ["User booked the Kanas lodge for 9 March, room 12."]
    assert (thin["reply_details"], thin["reply_missing_in_summaries"]) == (4, 2)
    assert thin["label"] is None and thin["drop_reason"] == UNDECIDED and thin["error"] is None
    lenient = label("lenient", answer_max_missing=2)
    assert lenient["label"] == "ANSWER" and lenient["points_in_summaries"] == 1  # the points witness agrees
