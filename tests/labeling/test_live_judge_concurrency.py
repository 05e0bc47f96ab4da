"""Two label runs sharing one live-judge file: each appends under a lock after reading what the other appended, so
the file holds every question once and loads; a question the other run judged first is taken from the file."""

from __future__ import annotations

import json
import threading

from labeling.judgments.format import load_judgments
from tests.labeling.test_judgments import _label_live
from tiermem.llm import ScriptedLLM


def _judge(barrier: threading.Barrier) -> ScriptedLLM:
    """A coverage judge saying yes of every unit; its first call waits for the other run's first call, so both
    runs have read the file before either appends (the race two runs started together meet)."""
    first = [True]

    def reply(messages):
        if first[0]:
            first[0] = False
            barrier.wait(timeout=60)
        units = [line for line in messages[-1]["content"].split("\n") if line.startswith("[")]
        return json.dumps({"units": [{"rank": i + 1, "verdict": "yes", "span": None} for i in range(len(units))],
                           "verdict": "yes", "reason": "scripted", "gold_doubtful": False})
    return ScriptedLLM(reply)


def test_two_concurrent_live_judge_runs_leave_each_question_once(tmp_path):
    path = tmp_path / "live.jsonl"
    barrier = threading.Barrier(2)
    judges = [_judge(barrier), _judge(barrier)]
    results: dict[int, list[dict]] = {}
    errors: list[BaseException] = []

    def label(i: int) -> None:
        try:
            results[i] = _label_live(tmp_path / f"run{i}", path, judges[i])
        except BaseException as exc:  # noqa: BLE001  re-raised below, in the test's thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=label, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    if errors:
        raise errors[0]
    judgments = load_judgments(path)  # loadable: no question judged twice
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    keys = [(x["conv_id"], x["qid"]) for x in lines]
    assert len(keys) == len(set(keys)) == len(judgments)
    for records in results.values():
        natural = [r for r in records if not r["augmentation"] and not r["error"]]
        assert natural and {(r["conv_id"], r["qid"]) for r in natural} == set(keys)
        assert all(r["s_ok_by"] == "judgment" and r["judgment_match"] == "matched" for r in natural)
    # the first question was judged by both runs at once; one line was kept and the other run took it
    assert sum(len(j.calls) for j in judges) >= len(keys) + 1
