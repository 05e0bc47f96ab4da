"""Probe table (docs/probes.md), the reader's stages: a cache that proves what it hands out,
floors and model directories checked where they are read, the files the package wrote read back by one reader
each, reading data checked before training. A tiny random BERT stands in for MiniLM (tests/helpers/tiny_bert.py);
whose fact by the cast, Ray's bounds and the rest: tests/test_probes_cast_ray.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.helpers.tiny_bert import tiny_bert
from tiermem.models.cache import MANIFEST, check_entry
from tiermem.models.cross_encoder import PRETRAIN_FILE

# ---- reader-pretrain: a checkpoint built once (tiny BERT), its cache entry copied per test -------------------------

FIXTURE = Path(__file__).parent / "helpers" / "fixtures" / "reading" / "squad2_small.json"
ARGS = ["chat_data=[]", "heldout_articles=1", "epochs=1", "batch_size=8", "log_every=0", "learning_rate=1e-3"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny base, a reader-pretrain run and its cache (cache/readers/<key>), built once for the module."""
    from router_train.reader.pretrain import main

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
    from router_train.reader.pretrain import main

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
    from router_train.reader import pretrain_cache

    entry = _cache(tmp_path, built, monkeypatch)
    loser = tmp_path / "loser"
    shutil.copytree(entry, loser)
    (loser / MANIFEST).unlink()
    pretrain_cache.store(loser, entry)  # what the second of two runs does after training in full
    assert "another run stored" in capsys.readouterr().err and loser.is_dir() and check_entry(entry, deep=True) is None
    shutil.rmtree(entry)
    entry.mkdir()  # a partial entry left by a killed run
    (entry / "config.json").write_text("{}")
    assert _pretrain(built, tmp_path / "out") == 0
    assert "failed its check" in capsys.readouterr().err and check_entry(entry, deep=True) is None


def test_output_dir_over_the_base_or_in_the_cache_is_refused_before_anything_is_written(tmp_path, built, monkeypatch,
                                                                                        capsys):
    from router_train.reader.pretrain import main as pretrain_main
    from router_train.reader.unit_reader import main as unit_reader_main

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


# ---- 4, 11: one reader of floors and of the reader's files --------------------------------------------------------


def _reader_dir(tmp_path, built) -> Path:
    reader = tmp_path / "reader"
    shutil.copytree(built["out"], reader)
    return reader


@pytest.mark.parametrize("floor", ["NaN", "Infinity", "-Infinity", "true", '"1.5"', "null"])
def test_a_floor_that_is_no_finite_number_is_refused_wherever_it_is_stored(floor, tmp_path, built):
    from tiermem.models.floors import ReaderFileError, load_floor, weights_sha256

    reader = _reader_dir(tmp_path, built)
    digest = weights_sha256(reader)
    (reader / "answer_floor.json").write_text(f'{{"floor": {floor}, "reader_weights_sha256": "{digest}"}}')
    with pytest.raises(ReaderFileError, match=r"answer_floor\.json: field 'floor' must be a finite number.*"
                                              r"tiermem-router answer-floor"):
        load_floor(reader)
    (reader / "answer_floor.json").unlink()
    text = (reader / PRETRAIN_FILE).read_text()
    meta = json.loads(text)
    bound = json.dumps(meta["heldout"]["answer_floor"]["floor"])
    (reader / PRETRAIN_FILE).write_text(text.replace(f'"floor": {bound}', f'"floor": {floor}'))
    with pytest.raises(ReaderFileError, match=r"heldout\.answer_floor\.floor' must be a finite number"):
        load_floor(reader)


def test_a_floor_in_reader_pretrain_json_is_bound_to_the_weights(tmp_path, built):
    from tiermem.models.floors import load_floor
    from tiermem.settings.errors import ConfigError

    reader = _reader_dir(tmp_path, built)
    meta = json.loads((reader / PRETRAIN_FILE).read_text())
    assert load_floor(reader) == meta["heldout"]["answer_floor"]["floor"]
    meta["heldout"]["answer_floor"]["floor"] = -1000
    del meta["heldout"]["answer_floor"]["reader_weights_sha256"]
    (reader / PRETRAIN_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="names no weights it was calibrated for"):
        load_floor(reader)
    meta["heldout"]["answer_floor"]["reader_weights_sha256"] = "0" * 64
    (reader / PRETRAIN_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="calibrated for other weights"):
        load_floor(reader)


BAD_FILES = {
    "invalid JSON": b"{not json", "null": b"null", "a list": b"[1, 2]", "not UTF-8": b'{"floor": "\xff"}',
}
BAD_META = {"heldout null": {"heldout": None}, "config null": {"config": None}, "heldout_articles 5":
            {"heldout_articles": 5}, "train_pairs a string": {"train_pairs": "many"}}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_an_unreadable_floor_or_pretrain_file_is_named_with_how_to_rebuild_it(name, tmp_path, built):
    from tiermem.models.floors import ReaderFileError, load_floor

    reader = _reader_dir(tmp_path, built)
    (reader / "answer_floor.json").write_bytes(BAD_FILES[name])
    with pytest.raises(ReaderFileError, match=r"answer_floor\.json.*calibrate it again"):
        load_floor(reader)
    (reader / "answer_floor.json").unlink()
    (reader / PRETRAIN_FILE).write_bytes(BAD_FILES[name])
    with pytest.raises(ReaderFileError, match=r"reader_pretrain\.json.*rebuild the checkpoint"):
        load_floor(reader)


@pytest.mark.parametrize("name", list(BAD_META))
def test_a_pretrain_file_of_another_shape_is_named_by_every_reader(name, tmp_path, built):
    from router_train.reader.unit_inputs import pretraining_of
    from tiermem.models.floors import ReaderFileError, read_pretrain_meta

    reader = _reader_dir(tmp_path, built)
    meta = {**json.loads((reader / PRETRAIN_FILE).read_text()), **BAD_META[name]}
    (reader / PRETRAIN_FILE).write_text(json.dumps(meta))
    field = next(iter(BAD_META[name]))
    with pytest.raises(ReaderFileError, match=f"field '{field}' must be"):
        read_pretrain_meta(reader)
    with pytest.raises(ReaderFileError, match=field):
        pretraining_of(str(reader))


def test_a_cached_pretrain_file_without_train_pairs_is_a_miss(tmp_path, built, monkeypatch, capsys):
    from router_train.reader.pretrain_cache import entry_problem
    from tiermem.models.cache import seal

    entry = _cache(tmp_path, built, monkeypatch)
    meta = json.loads((entry / PRETRAIN_FILE).read_text())
    del meta["train_pairs"]
    (entry / PRETRAIN_FILE).write_text(json.dumps(meta))
    seal(entry)  # even re-sealed, the file must read
    assert "missing field 'train_pairs'" in entry_problem(entry)


# ---- 5, 12: a model directory is checked before it is loaded ------------------------------------------------------


def _variant(tmp_path, built, how: str) -> Path:
    path = _reader_dir(tmp_path, built)
    weights = path / "model.safetensors"
    if how == "no tokenizer files":
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            (path / name).unlink(missing_ok=True)
    elif how == "another model's tokenizer":
        from transformers import BertTokenizerFast

        (path / "tokenizer.json").unlink()
        (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
        BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(str(path))
    elif how == "no config.json":
        (path / "config.json").unlink()
    elif how == "garbage weights":
        weights.write_bytes(b"garbage" * 100)
    elif how == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:-5000])
    elif how == "99 layers":
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 99}))
    return path


@pytest.mark.parametrize("how, message", [
    ("no tokenizer files", "no tokenizer files"), ("another model's tokenizer", "not the model's own tokenizer"),
    ("no config.json", "config.json not found"), ("garbage weights", "not a readable safetensors file"),
    ("truncated weights", "not a readable safetensors file"), ("99 layers", "config.json does not fit")])
def test_a_model_directory_that_cannot_be_read_as_it_is_is_a_named_error(how, message, tmp_path, built, monkeypatch,
                                                                         capsys):
    from router_train.reader.unit_inputs import fresh_reader
    from router_train.reader.unit_reader import UnitReaderConfig
    from tiermem.memory.extractive import load_answer_reader
    from tiermem.models.model_dir import ModelDirError

    path = _variant(tmp_path, built, how)
    with pytest.raises(ModelDirError, match=message):
        load_answer_reader(path)
    with pytest.raises(ModelDirError, match=message):  # unit-reader's base, after its records are read
        fresh_reader(UnitReaderConfig(base=str(path)))
    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    assert _pretrain({"base": path}, tmp_path / "pre") == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "pre").exists()  # checked before the claim: nothing written


def test_an_empty_base_and_a_bin_reader(tmp_path, built, capsys):
    from tiermem.models.floors import weights_sha256
    from tiermem.models.model_dir import ModelDirError, check_model_dir

    with pytest.raises(ModelDirError, match="base= is empty"):
        check_model_dir("", "base=")
    assert _pretrain({"base": ""}, tmp_path / "pre") == 2
    reader = _reader_dir(tmp_path, built)
    (reader / "model.safetensors").rename(reader / "pytorch_model.bin")  # hashed by the file that holds them
    assert weights_sha256(reader) == hashlib.sha256((reader / "pytorch_model.bin").read_bytes()).hexdigest()


# ---- 9, 13: reading data and settings checked before any training ------------------------------------------------


def _data(tmp_path, change) -> Path:
    doc = json.loads(FIXTURE.read_text())
    change(doc)
    path = tmp_path / "data.json"
    path.write_text(json.dumps(doc))
    return path


def _set_context(text):
    def change(doc):
        para = doc["data"][2]["paragraphs"][0]
        para["context"], para["qas"] = text, [{**q, "is_impossible": True, "answers": []} for q in para["qas"]]
    return change


def _all_answerable(doc):
    for article in doc["data"]:
        for para in article["paragraphs"]:
            para["qas"] = [q for q in para["qas"] if not q.get("is_impossible")]


def _surrogate(doc):
    doc["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Who \ud800 mapped it?"


@pytest.mark.parametrize("change, message", [
    (_set_context(""), "is empty or white space"), (_set_context("  \n\t "), "is empty or white space"),
    (_surrogate, "lone surrogate"), (_all_answerable, "both are needed")])
def test_reading_data_a_run_could_not_finish_on_is_named_before_training(change, message, tmp_path, built,
                                                                         monkeypatch, capsys):
    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    assert _pretrain(built, tmp_path / "out", data=_data(tmp_path, change)) == 3
    err = capsys.readouterr().err
    assert message in err and "DataError" in err and "epoch" not in err


def test_a_diverged_run_is_named_as_it_happens(tmp_path, built, monkeypatch, capsys):
    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    assert _pretrain(built, tmp_path / "out", "learning_rate=1e6", "epochs=3") == 6
    assert "the training diverged" in capsys.readouterr().err


def test_settings_of_another_shape_are_named(tmp_path, monkeypatch, capsys):
    import sys
    import types

    from router_train.reader.reading_data import load_squad_hub
    from router_train.reader.unit_reader import UnitReaderConfig
    from tiermem.settings.config import parse_config
    from tiermem.settings.errors import ConfigError, DataError

    with pytest.raises(ConfigError, match="finetune_layers"):
        parse_config(UnitReaderConfig, None, ["finetune_layers=[1.5]"])
    for answers in ([{"text": "Ada", "answer_start": 0}], {"text": ["Ada", "b"], "answer_start": [0]}):
        row = {"id": "a", "title": "T", "context": "Ada built a boat.", "question": "Who?", "answers": answers}
        fake = types.SimpleNamespace(load_dataset=lambda n, split, row=row: [row])
        monkeypatch.setitem(sys.modules, "datasets", fake)
        with pytest.raises(DataError, match=r"row 0: field 'answers' must"):
            load_squad_hub("org/x", "validation")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "file"))
    assert _pretrain({"base": "packaged:all-minilm-l6-v2"}, tmp_path / "out") == 2
    assert "is not a directory" in capsys.readouterr().err
