"""Probe table (docs/probes.md), beside the reader's stages (tests/test_probes_reader_stages.py):
whose fact it is when the cast is data, `label executor=ray` bounded, a missing router directory named as one, and
no extractive answer of punctuation only."""

from __future__ import annotations

import pytest

from tiermem.text.persons import Cast, person_guard

# ---- 6: whose fact it is, when the cast is data ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["May", "June", "April", "Will", "Jan", "Mar", "Sun"])
def test_a_speaker_named_like_a_month_or_a_modal_is_a_person(name):
    guard = person_guard(f"What did {name} buy last week?", Cast(("Ana", name), ()))
    assert guard.known == ((name.lower(), (name,)),)
    assert not guard.about("Ana: I bought a red car last week.", ["Ana"])
    assert guard.about(f"{name}: I bought a bike.", [name])
    # not a speaker: still a date or a verb
    assert person_guard(f"What did Ana buy in {name}?", Cast(("Ana", "Bo"), ())).persons == ("ana",)
    assert person_guard("What will Ana buy?", Cast(("Ana", "Will"), ())).known == (("ana", ("Ana",)),)


@pytest.mark.parametrize("pair", [("Dan", "Danielle"), ("Ann", "Anna"), ("Maria", "Mario"), ("Julia", "Julie")])
def test_two_speakers_the_spelling_rules_would_merge_stay_two(pair):
    cast = Cast((*pair, "Ana"), ())
    for name, other in (pair, pair[::-1]):
        guard = person_guard(f"What did {name} buy?", cast)
        assert guard.known == ((name.lower(), (name,)),)
        assert guard.about(f"{name}: I bought a car", [name])
        assert not guard.about(f"{other}: I bought a car", [other])
    # one of them speaking: the spelling rules still join a variant to it
    assert person_guard(f"What did {pair[1]} buy?", Cast((pair[0], "Ana"), ())).known == (
        (pair[1].lower(), (pair[0],)),)


def test_a_lower_case_word_a_determiner_makes_a_noun_is_not_the_speaker():
    guard = person_guard("What did Bill pay for?", Cast(("Ana", "Bill"), ()))
    assert not guard.about("Ana: I paid the bill for the phone.", ["Ana"])
    assert not guard.about("Ana: my bill came today.", ["Ana"])
    assert guard.about("Ana: bill said he paid for the phone.", ["Ana"])  # in lower case, a name still counts
    assert guard.about("Ana: I told Bill about the phone.", ["Ana"])


def test_a_question_addressing_someone_is_about_them():
    cast = Cast(("Caroline", "Melanie"), ())
    guard = person_guard("Melanie, what did you paint?", cast)
    assert guard.known == (("melanie", ("Melanie",)),)
    assert guard.about("Melanie: a sunrise", ["Melanie"]) and not guard.about("Caroline: a lake", ["Caroline"])
    assert not person_guard("Well, what did they paint?", cast).persons  # a word no one bears: no one


def test_a_name_in_a_script_without_spaces_is_found_inside_the_question():
    cast = Cast(("美玲", "Tom"), ())
    guard = person_guard("美玲买了什么?", cast)
    assert guard.known == (("美玲", ("美玲",)),)
    assert guard.about("美玲: 一辆车", ["美玲"]) and not guard.about("Tom: a car", ["Tom"])
    assert guard.about("Tom: 我看见美玲买了车", ["Tom"])


# ---- 3: label executor=ray waits for nothing it cannot get -------------------------------------------------------


def _fake_ray(monkeypatch, cpus: float = 2.0) -> list[str]:
    """A stand-in for Ray that records what was asked of it: the checks run before any task is submitted."""
    import sys
    import types

    calls: list[str] = []
    fake = types.SimpleNamespace(
        is_initialized=lambda: False, init=lambda **kw: calls.append(f"init {kw}"),
        cluster_resources=lambda: {"CPU": cpus}, shutdown=lambda: calls.append("shutdown"),
        remote=lambda fn: calls.append("remote") or pytest.fail("a task was submitted"))
    monkeypatch.setitem(sys.modules, "ray", fake)
    return calls


def test_ray_cpus_per_task_beyond_the_cluster_is_named_before_any_task(tmp_path, monkeypatch, capsys):
    from tests.labeling.test_ray_executor import GENERATOR_FREE, _config, _label

    calls = _fake_ray(monkeypatch, cpus=2.0)
    rc = _label(_config(tmp_path, GENERATOR_FREE), tmp_path / "out", "executor=ray", "shards=2",
                "ray_cpus_per_task=64")
    err = capsys.readouterr().err
    assert rc == 2 and "ray_cpus_per_task=64, but the Ray cluster has 2 CPU(s)" in err
    assert "remote" not in calls and calls[-1] == "shutdown"


def test_an_unreachable_ray_address_is_exit_7_at_once(tmp_path, monkeypatch, capsys):
    import socket
    import time

    from tests.labeling.test_ray_executor import GENERATOR_FREE, _config, _label

    calls = _fake_ray(monkeypatch)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    rc = _label(_config(tmp_path, GENERATOR_FREE), tmp_path / "out", "executor=ray", "shards=2",
                f"ray_address=127.0.0.1:{port}")
    err = capsys.readouterr().err
    assert rc == 7 and f"ray_address=127.0.0.1:{port}: the Ray cluster cannot be reached" in err
    assert not calls and time.monotonic() - started < 30


@pytest.mark.slow
def test_ray_cpus_per_task_beyond_a_real_cluster_exits_2(tmp_path, capsys):
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (make test-all installs it)")
    from tests.labeling.test_ray_executor import GENERATOR_FREE, _config, _label

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        rc = _label(_config(tmp_path, GENERATOR_FREE), tmp_path / "out", "executor=ray", "shards=2",
                    "ray_cpus_per_task=64")
    finally:
        ray.shutdown()
    assert rc == 2 and "but the Ray cluster has 2 CPU(s)" in capsys.readouterr().err


# ---- also worth fixing ---------------------------------------------------------------------------------------------


def test_a_missing_router_directory_is_named_as_one(tmp_path, monkeypatch):
    from serving.routers.spec import build
    from tiermem.settings.errors import HubError

    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"no directory 'runs/nope' here \(runs/ exists"):
        build("runs/nope")


def test_a_sentence_of_punctuation_only_is_no_answer():
    from tiermem.memory.extractive import _split
    from tiermem.memory.grounding import Evidence, _Candidate

    def quotes(text):
        return [c.evidence.quote for c in _split(_Candidate(Evidence(text, "Tomas", None, "t1", "p1", "page"), text,
                                                            frozenset()))]

    assert quotes("...") == [] and quotes("?!") == []  # a turn of punctuation only: nothing to read
    assert quotes("Well... I adopted Pepper.") == ["Well...", "I adopted Pepper."]
