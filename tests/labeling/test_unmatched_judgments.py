"""`label judgments=FILE` that judges none of the run's questions: refused, as eval refuses it; the command line
says how many questions the judgments decided."""

from __future__ import annotations

import json

import pytest

from labeling import stage
from labeling.config import LabelConfig
from labeling.roles import Roles
from labeling.run import run
from tests.helpers.label_helpers import HashEmbedder
from tests.labeling.test_judgments import MEMORY, judgment, write
from tiermem.settings.config import from_dict
from tiermem.settings.errors import ConfigError


def _cfg(out, judgments) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "memory": MEMORY, "label_rule": "evidence",
                                   "generate_answers": False, "judgments": judgments and str(judgments),
                                   "split": {"train": ["sample-1", "sample-2"]}})


def _label(cfg: LabelConfig) -> dict:
    return run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())


def test_a_file_judging_other_questions_is_refused_before_labeling(tmp_path):
    path = write(tmp_path / "j.jsonl", [judgment("conv-99", "conv-99:q0", "Who?", ["a"], ["no"], "no")])
    with pytest.raises(ConfigError, match=r"none of its 1 judgment\(s\) names one of the \d+ selected questions"):
        _label(_cfg(tmp_path / "run", path))
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_a_file_judging_other_units_is_refused_after_labeling_and_coverage_is_printed(tmp_path, monkeypatch,
                                                                                      capsys):
    probe = tmp_path / "probe"
    _label(_cfg(probe, None))
    natural = [json.loads(x) for x in (probe / "all_records.jsonl").read_text().splitlines()]
    natural = [r for r in natural if not r["augmentation"] and not r["error"]]
    rows = [judgment(r["conv_id"], r["qid"], r["question"], ["units this run did not retrieve"], ["yes"], "yes")
            for r in natural]
    path = write(tmp_path / "j.jsonl", rows)
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=rf"0 of {len(natural)} questions judged over their units"):
        _label(_cfg(out, path))
    assert (out / "records.jsonl").is_file() and not (out / "dataset").exists()  # kept for the rerun, no dataset

    monkeypatch.setattr(stage, "run", lambda cfg, roles, embedder: _label(cfg))
    (tmp_path / "label.yaml").write_text("{}\n")  # the dataclass's defaults: the sample conversations
    rows = [judgment(r["conv_id"], r["qid"], r["question"], [u["text"] for u in r["router_summaries"]],
                     ["no"] * len(r["router_summaries"]), "no") for r in natural]
    matching = write(tmp_path / "m.jsonl", rows)
    argv = ["--config", str(tmp_path / "label.yaml"), f"output_dir={tmp_path / 'matched'}", f"judgments={matching}",
            "label_rule=evidence", "generate_answers=false",
            "split.train=[sample-1,sample-2]", *[f"memory.{k}={v}" for k, v in MEMORY.items()]]
    assert stage.main(argv) == 0
    printed = capsys.readouterr().out
    assert f"judgments {matching}: {len(natural)} of {len(natural)} questions judged over their units (0 over " \
           "other units" in printed
    assert (tmp_path / "matched" / "dataset").is_dir()
