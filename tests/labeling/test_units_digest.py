"""A judgment's unit digest names exactly the units it read: the texts' JSON list, never their newline join (units
['a\\nb', 'c'] are not ['a', 'b', 'c']), and the count is checked. The older newline digest of shipped files is
read only where it cannot be ambiguous: no unit text holds a newline, and as many units as were judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from labeling.judgments.format import load_judgments, text_digest, units_digest
from serving.routers.spec import RouterSpec, build
from tests.labeling.test_judgments import judgment, write

SHIPPED = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo10_dev_judgments.jsonl"


def _legacy(texts: list[str]) -> str:
    return text_digest("\n".join(texts))  # how the shipped judgments name their units


def _file(tmp_path, texts: list[str], digest: str) -> Path:
    row = judgment("c1", "q1", "Where did Ana go?", texts, ["yes"] + ["no"] * (len(texts) - 1), "yes")
    row["units_sha1"] = digest
    return write(tmp_path / "j.jsonl", [row])


def test_units_joined_by_a_newline_never_match_a_judgment_of_the_split_units(tmp_path):
    split, joined = ["Ana went", "to Paris.", "Leo bakes."], ["Ana went\nto Paris.", "Leo bakes."]
    assert units_digest(split) != units_digest(joined)
    for digest in (_legacy(split), units_digest(split)):  # a shipped (older) digest, and this version's
        j = load_judgments(_file(tmp_path, split, digest))
        assert j.match("c1", "q1", "Where did Ana go?", joined) == (None, "units_differ")
        assert j.lookup("Where did Ana go?", joined) is None
        assert j.match("c1", "q1", "Where did Ana go?", split)[1] == "matched"
    # a judgment of the joined units under the older digest: each unit's own digest proves the texts it read
    j = load_judgments(_file(tmp_path, joined, _legacy(joined)))
    assert j.match("c1", "q1", "Where did Ana go?", split) == (None, "units_differ")
    assert j.match("c1", "q1", "Where did Ana go?", joined)[1] == "matched"
    # as many units, joined alike, cut elsewhere: the older digest agrees, the units' own digests do not
    moved = ["Ana went", "to Paris.\nLeo bakes."]
    assert _legacy(moved) == _legacy(joined)
    assert j.match("c1", "q1", "Where did Ana go?", moved) == (None, "units_differ")
    assert j.lookup("Where did Ana go?", moved) is None
    j = load_judgments(_file(tmp_path, joined, units_digest(joined)))  # this version's digest: exact
    assert j.match("c1", "q1", "Where did Ana go?", joined)[1] == "matched"
    assert j.match("c1", "q1", "Where did Ana go?", split) == (None, "units_differ")


def test_the_unit_count_is_checked(tmp_path):
    # no unit and one empty unit join alike (""): a judgment of no units says nothing of an empty one
    row = judgment("c1", "q1", "Where did Ana go?", [], [], "no")
    row["units_sha1"] = _legacy([])
    j = load_judgments(write(tmp_path / "j.jsonl", [row]))
    assert j.match("c1", "q1", "Where did Ana go?", [""]) == (None, "units_differ")
    assert j.lookup("Where did Ana go?", [""]) is None
    assert j.match("c1", "q1", "Where did Ana go?", [])[1] == "matched"


def test_the_recorded_teacher_gives_no_decision_for_units_it_did_not_read(tmp_path):
    split, joined = ["Ana went", "to Paris.", "Leo bakes."], ["Ana went\nto Paris.", "Leo bakes."]
    router = build(RouterSpec(kind="recorded-teacher", path=str(_file(tmp_path, split, _legacy(split)))))
    units = [{"text": t, "date": None} for t in joined]
    d = router.route("Where did Ana go?", units)
    assert d.error is not None and d.action == "ESCALATE" and router.unrecorded == 1
    assert router.route("Where did Ana go?", [{"text": t, "date": None} for t in split]).error is None


def test_the_shipped_judgments_still_load_and_name_their_units_by_the_older_digest():
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} not here")
    j = load_judgments(SHIPPED)
    assert len(j) > 1000
    one = next(iter(j.by_key.values()))
    assert len(one.units) >= 1 and len(one.units_sha1) == 16
