"""Probe table, round five (docs/probes.md, issue 41): a cache that proves what it hands out, floors and readers
checked where they are read, whose fact by the cast, Ray bounded, and the files the package wrote read back by one
reader each. A tiny random BERT stands in for MiniLM (tests/helpers/tiny_bert.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.helpers.tiny_bert import tiny_bert
from tiermem.cross_encoder import PRETRAIN_FILE
from tiermem.model_cache import MANIFEST, check_entry
from tiermem.persons import Cast, person_guard

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


# ---- reader-pretrain: a checkpoint built once (tiny BERT), its cache entry copied per test -------------------------

FIXTURE = Path(__file__).parent / "helpers" / "fixtures" / "reading" / "squad2_small.json"
ARGS = ["heldout_articles=1", "epochs=1", "batch_size=8", "log_every=0", "learning_rate=1e-3"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny base, a reader-pretrain run and its cache (cache/readers/<key>), built once for the module."""
    from router_train.reader_pretrain import main

    root = tmp_path_factory.mktemp("built")
    base = tiny_bert(root / "tiny")
    old = os.environ.get("TIERMEM_CACHE")
    os.environ["TIERMEM_CACHE"] = str(root / "cache")
    try:
        assert main([f"data={FIXTURE}", f"base={base}", *ARGS, f"output_dir={root / 'out'}"]) == 0
    finally:
        os.environ.pop("TIERMEM_CACHE") if old is None else os.environ.__setitem__("TIERMEM_CACHE", old)
    entry = next(p for p in (root / "cache" / "readers").iterdir() if (p / MANIFEST).is_file())
    return {"root": root, "base": base, "out": root / "out", "cache": root / "cache", "key": entry.name}


def _cache(tmp_path, built, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(built["cache"], cache, symlinks=True)
    monkeypatch.setenv("TIERMEM_CACHE", str(cache))
    return cache / "readers" / built["key"]


def _pretrain(built, out, *extra, data=FIXTURE) -> int:
    from router_train.reader_pretrain import main

    return main([f"data={data}", f"base={built['base']}", *ARGS, f"output_dir={out}", *extra])


def _corrupt(entry: Path, how: str, outside: Path) -> None:
    weights = entry / "model.safetensors"
    if how == "zeros":
        weights.write_bytes(bytes(1000))
    elif how == "flipped tail":
        data = bytearray(weights.read_bytes())
        data[-5000:] = bytes(b ^ 0xFF for b in data[-5000:])
        weights.write_bytes(bytes(data))
    elif how == "link":
        outside.write_text('{"secret": "not the tokenizer"}')
        (entry / "tokenizer.json").unlink()
        (entry / "tokenizer.json").symlink_to(outside)
    elif how == "floor nan":
        meta = json.loads((entry / PRETRAIN_FILE).read_text())
        meta["heldout"]["answer_floor"]["floor"] = float("nan")
        (entry / PRETRAIN_FILE).write_text(json.dumps(meta))
    elif how == "no manifest":  # an entry from before digests, or a partial one
        (entry / MANIFEST).unlink()


@pytest.mark.parametrize("how", ["zeros", "flipped tail", "link", "floor nan", "no manifest"])
def test_a_cache_entry_that_fails_its_check_is_a_miss_that_rebuilds_never_a_copy(how, tmp_path, built, monkeypatch,
                                                                                 capsys):
    entry = _cache(tmp_path, built, monkeypatch)
    _corrupt(entry, how, tmp_path / "secret.json")
    capsys.readouterr()
    assert _pretrain(built, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "failed its check" in err and "a miss, rebuilding it" in err and "cache hit" not in err
    for name in ("model.safetensors", "tokenizer.json"):  # the rebuilt (seeded) checkpoint, not what was planted
        assert (tmp_path / "out" / name).read_bytes() == (built["out"] / name).read_bytes()
    assert check_entry(entry, deep=True) is None and not (entry / "tokenizer.json").is_symlink()
    assert _pretrain(built, tmp_path / "again") == 0 and "cache hit" in capsys.readouterr().err


def test_a_verified_hit_copies_and_entries_are_readable_by_every_user(tmp_path, built, monkeypatch, capsys):
    entry = _cache(tmp_path, built, monkeypatch)
    assert _pretrain(built, tmp_path / "out") == 0
    assert "verified): no training" in capsys.readouterr().err
    assert stat.S_IMODE(entry.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in entry.iterdir()} == {0o644}
    assert stat.S_IMODE((built["out"] / "model.safetensors").stat().st_mode) == 0o644  # saved by save_pretrained


def test_the_loser_of_a_race_takes_the_winners_entry_and_a_partial_entry_is_rebuilt(tmp_path, built, monkeypatch,
                                                                                    capsys):
    from router_train import reader_cache

    entry = _cache(tmp_path, built, monkeypatch)
    loser = tmp_path / "loser"
    shutil.copytree(entry, loser)
    (loser / MANIFEST).unlink()
    reader_cache.store(loser, entry)  # what the second of two runs does after training in full
    assert "another run stored" in capsys.readouterr().err and loser.is_dir() and check_entry(entry, deep=True) is None
    shutil.rmtree(entry)
    entry.mkdir()  # a partial entry left by a killed run
    (entry / "config.json").write_text("{}")
    assert _pretrain(built, tmp_path / "out") == 0
    assert "failed its check" in capsys.readouterr().err and check_entry(entry, deep=True) is None


def test_output_dir_over_the_base_or_in_the_cache_is_refused_before_anything_is_written(tmp_path, built, monkeypatch,
                                                                                        capsys):
    from router_train.reader_pretrain import main as pretrain_main
    from router_train.unit_reader import main as unit_reader_main

    entry = _cache(tmp_path, built, monkeypatch)
    base = tmp_path / "base"
    shutil.copytree(built["out"], base)
    before = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    for out in (base, tmp_path / "." / "base"):
        assert pretrain_main([f"data={FIXTURE}", f"base={base}", *ARGS, "cache=false", f"output_dir={out}"]) == 4
        assert "overwrite what it reads" in capsys.readouterr().err
    assert unit_reader_main([f"base={base}", f"output_dir={base}"]) == 4
    assert {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()} == before
    for out in (entry.parent, entry.parent.parent, entry.parent / "mine"):
        assert _pretrain(built, out) == 4
        assert "the model cache" in capsys.readouterr().err
    assert sorted(p.name for p in entry.parent.iterdir() if not p.name.startswith(".")) == [built["key"]]
