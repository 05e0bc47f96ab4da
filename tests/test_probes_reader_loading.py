"""Probe table (docs/probes.md), the readers: one checked loader for every stage that reads a
model (answer-floor too), every weight finite, a span answer only from finite margins and whole words, a stored
floor read as it is trusted, a pickled base named. Chat data, `ask`, `demo` and `serve`:
tests/test_probes_chat_data_cli_args.py. A tiny random BERT stands in for MiniLM (tests/helpers/tiny_bert.py)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from tests.helpers.tiny_bert import tiny_bert

MOLWENI = Path(__file__).parent / "helpers" / "fixtures" / "reading" / "molweni_small.json"
SQUAD = Path(__file__).parent / "helpers" / "fixtures" / "reading" / "squad2_small.json"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("tiny") / "bert")


def _reader_run(tmp_path: Path, tiny: Path) -> Path:
    """A copy of the tiny reader in a reader-pretrain run directory (answer-floor updates only such runs)."""
    from tiermem.runs.rundir import claimed_output_dir

    with claimed_output_dir(tmp_path / "reader", "reader-pretrain") as out:
        for f in tiny.iterdir():
            shutil.copy(f, out / f.name)
    return tmp_path / "reader"


def _tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _save(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})


def _config(path: Path, **change) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))


def _with_span_head(t: dict, rows: int = 2) -> dict:
    import torch

    return {**t, "qa_outputs.weight": torch.zeros(rows, 32), "qa_outputs.bias": torch.zeros(rows)}


def _break(path: Path, how: str) -> None:
    import torch

    t = _tensors(path)
    if how == "no tokenizer files":
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            (path / name).unlink(missing_ok=True)
    elif how == "QA checkpoint without the classifier":
        _save(path, _with_span_head({k: v for k, v in t.items() if not k.startswith("classifier.")}))
    elif how == "config of 1 layer over 2":
        _config(path, num_hidden_layers=1)
    elif how == "an extra tensor":
        _save(path, {**t, "bert.pooler.extra": torch.zeros(3)})
    elif how == "header-only safetensors":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: 8 + int.from_bytes(data[:8], "little")])
    elif how == "span head of the wrong shape":
        _save(path, _with_span_head(t, rows=3))
    elif how == "hidden size that does not fit":
        _config(path, hidden_size=64)
    elif how == "positions that do not fit":
        _config(path, max_position_embeddings=512)
    elif how == "bogus model_type":
        _config(path, model_type="no-such-model")
    elif how == "garbage tokenizer":
        (path / "tokenizer.json").write_text("{garbage")
    elif how == "NaN in the span head":
        _save(path, {**_with_span_head(t), "qa_outputs.weight": torch.full((2, 32), float("nan"))})
    elif how == "Inf in the classifier":
        _save(path, {**t, "classifier.weight": torch.full_like(t["classifier.weight"], float("inf"))})


BROKEN = {
    "no tokenizer files": "no tokenizer files", "QA checkpoint without the classifier": "missing 2 weight",
    "config of 1 layer over 2": "the config has no place for", "an extra tensor": "the config has no place for",
    "header-only safetensors": "not a readable safetensors file", "span head of the wrong shape": "of another shape",
    "hidden size that does not fit": "of another shape", "positions that do not fit": "of another shape",
    "bogus model_type": "does not describe a model", "garbage tokenizer": "cannot be loaded",
    "NaN in the span head": "hold NaN or infinite values (qa_outputs.weight)",
    "Inf in the classifier": "hold NaN or infinite values (classifier.weight)",
}


@pytest.mark.parametrize("how", list(BROKEN))
def test_answer_floor_reads_the_reader_through_the_checked_loader_and_writes_nothing(how, tmp_path, tiny, capsys):
    from router_train.reader.chat_floor import main as chat_floor_main
    from tiermem.memory.extractive import load_answer_reader
    from tiermem.models.model_dir import ModelDirError

    reader = _reader_run(tmp_path, tiny)
    _break(reader, how)
    args = [f"reader={reader}", "data=", "conversations=[]", f"molweni={MOLWENI}", "max_questions=4"]
    assert chat_floor_main(args) == 2
    err = capsys.readouterr().err
    assert "ModelDirError" in err and BROKEN[how] in err and str(reader) in err, err
    assert not (reader / "answer_floor.json").exists()
    with pytest.raises(ModelDirError, match=BROKEN[how].replace("(", r"\(").replace(")", r"\)")):
        load_answer_reader(reader)  # what `ask memory.reader=` and serve read: the same loader, the same error


def test_every_weight_is_checked_once_per_state_of_the_file(tmp_path, tiny, monkeypatch):
    import torch

    from tiermem.models import model_dir

    reader = _reader_run(tmp_path, tiny)
    seen = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: seen.append(t.shape) or real(t))
    model_dir.check_model_dir(reader)
    model_dir.load_reader(reader)  # checked again: the file has not changed, its tensors are not read again
    assert len(seen) == len(_tensors(reader))
    _break(reader, "Inf in the classifier")
    with pytest.raises(model_dir.ModelDirError, match="NaN or infinite"):
        model_dir.check_model_dir(reader)


def test_a_span_answer_comes_only_from_a_finite_margin_inside_the_sentence_as_whole_words():
    from tiermem.memory.extractive import span_answer

    class Spans:
        def __init__(self, start, end, margin):
            self.got = (start, end, margin)

        def best_spans(self, questions, texts):
            return [self.got]

    text = "2 March 2024: Tomas: I adopted Pepper yesterday."
    prefix = len("2 March 2024: Tomas: ")
    assert span_answer(Spans(0, 2, float("nan")), "q", text, prefix) is None  # "17"-like fragments of NaN margins
    assert span_answer(Spans(0, 2, float("inf")), "q", text, prefix) is None
    assert span_answer(Spans(0, 2, 3.0), "q", text, prefix) is None  # all inside `date: speaker: `
    assert span_answer(Spans(prefix + 11, prefix + 15, 3.0), "q", text, prefix) == "Pepper"  # "ppe" widened
    assert span_answer(Spans(prefix - 7, prefix + 9, 3.0), "q", text, prefix) == "I adopted"  # cut at the prefix


def test_a_tampered_stored_floor_is_recalibrated_never_reported_as_current(tmp_path, tiny, capsys):
    from router_train.reader.chat_floor import main as chat_floor_main
    from tiermem.models.floors import load_floor

    reader = _reader_run(tmp_path, tiny)
    args = [f"reader={reader}", "data=", "conversations=[]", f"molweni={MOLWENI}", "max_questions=4"]
    assert chat_floor_main(args) == 0
    text = (reader / "answer_floor.json").read_text()
    floor = json.loads(text)["floor"]
    for bad in ("NaN", '"abc"', "null", "Infinity"):
        (reader / "answer_floor.json").write_text(text.replace(f'"floor": {json.dumps(floor)}', f'"floor": {bad}'))
        capsys.readouterr()
        assert chat_floor_main(args) == 0
        out, err = capsys.readouterr()
        assert "is current" not in out and "must be a finite number" in err and "recalibrating" in err
        assert load_floor(reader) == floor  # what `ask` reads again: the recalibrated floor
    assert chat_floor_main(args) == 0 and "is current" in capsys.readouterr().out


def test_a_floor_no_better_than_chance_is_stored_with_a_warning(capsys):
    from router_train.reader.answer_floor import calibrated_floor

    floor = calibrated_floor([-1.0, -2.0, 3.0, 4.0], [True, True, False, False])
    assert floor["youden_j"] < 0 and "no better than chance" in floor["warning"]
    assert "warning" in capsys.readouterr().err
    assert "warning" not in calibrated_floor([3.0, 4.0, -1.0], [True, True, False])


class _Payload:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/tiermem-round6-pickle-ran"),))


def test_a_pickled_base_is_a_named_model_directory_error_and_never_runs(tmp_path, tiny, monkeypatch, capsys):
    import torch

    from router_train.reader.pretrain import main as pretrain_main
    from tiermem.models.model_dir import ModelDirError, check_model_dir

    ran = Path("/tmp/tiermem-round6-pickle-ran")
    ran.unlink(missing_ok=True)
    base = tmp_path / "base"
    shutil.copytree(tiny, base)
    (base / "model.safetensors").unlink()
    (base / "pytorch_model.bin").write_bytes(pickle.dumps({"bert.embeddings.word_embeddings.weight": _Payload()}))
    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    args = [f"data={SQUAD}", f"base={base}", "chat_data=[]", "heldout_articles=1", f"output_dir={tmp_path / 'out'}"]
    assert pretrain_main(args) == 2
    err = capsys.readouterr().err
    assert "ModelDirError" in err and "pytorch_model.bin" in err and "weights_only" in err and "Traceback" not in err
    assert not ran.exists() and not (tmp_path / "out").exists()
    good = tmp_path / "good"  # a plain state dict saved with torch.save loads as it did
    shutil.copytree(tiny, good)
    torch.save(_tensors(good), good / "pytorch_model.bin")
    (good / "model.safetensors").unlink()
    assert check_model_dir(good) == good
    torch.save({"a": 1}, good / "pytorch_model.bin")
    with pytest.raises(ModelDirError, match="not a mapping of weight names to tensors"):
        check_model_dir(good)
