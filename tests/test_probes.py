"""Probe table (docs/probes.md): malformed data files, configs and HTTP bodies, each through the real entry point.

Every probe asserts the named error in the one-line message, the exit code of `tiermem-router`, that the
message names the file or field, and that nothing was left behind in the output directory.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serving.routers.fixed import AlwaysEscalate
from serving.server import ServeConfig, create_app
from tiermem.settings.errors import EXIT_DATA, EXIT_USAGE
from tiermem_cli import cli

FIXTURES = Path(__file__).parent / "helpers" / "fixtures" / "memory"
LOCOMO = json.loads((FIXTURES / "locomo_tiny.json").read_text())
LME = json.loads((FIXTURES / "longmemeval_tiny.json").read_text())


def _locomo(edit: Any) -> Any:
    data = copy.deepcopy(LOCOMO)
    edit(data)
    return data


def _lme(edit: Any) -> Any:
    data = copy.deepcopy(LME)
    edit(data)
    return data


def _set(path: str, value: Any) -> Any:
    """edit(data): set data[...] along `a.0.b`-style path."""
    def edit(data: Any) -> None:
        *head, last = path.split(".")
        node = data
        for part in head:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return edit


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# name -> (file content: JSON-able object or raw text, expected error class name, message needle)
DATA_PROBES: dict[str, tuple[Any, str, str]] = {
    "longmemeval duplicate question_id": (
        _lme(lambda d: d.append({**copy.deepcopy(d[0]), "answer": "another answer"})),
        "DataError", "duplicate question_id 'q-degree' at positions 0 and 2"),
    "locomo duplicate sample_id": (_locomo(lambda d: d.append(copy.deepcopy(d[0]))), "DataError",
                                   "duplicate sample_id 'tiny-1' at positions 0 and 1"),
    "whitespace-only question": (_locomo(_set("0.qa.0.question", "   ")), "DataError", "field 'question' is empty"),
    "empty gold answer": (_locomo(_set("0.qa.0.answer", "")), "DataError", "field 'answer' is empty"),
    "blank longmemeval answer": (_lme(_set("0.answer", " ")), "DataError", "field 'answer' is empty"),
    "NaN answer": (json.dumps(_locomo(_set("0.qa.0.answer", float("nan")))), "DataError", "field 'answer' is nan"),
    "category 0": (_locomo(_set("0.qa.0.category", 0)), "DataError", "field 'category' must be one of"),
    "category 7": (_locomo(_set("0.qa.0.category", 7)), "DataError", "got 7"),
    "category 99": (_locomo(_set("0.qa.0.category", 99)), "DataError", "got 99"),
    "category -1": (_locomo(_set("0.qa.0.category", -1)), "DataError", "got -1"),
    "all turn texts empty": (_locomo(lambda d: [t.update(text="", blip_caption=None) for k, s in
                                                d[0]["conversation"].items() if k.startswith("session_")
                                                and isinstance(s, list) for t in s]),
                             "DataError", "every turn's text is empty"),
    "longmemeval duplicate session id": (_lme(_set("0.haystack_session_ids", ["s-1", "s-1"])), "DataError",
                                         "duplicate haystack_session_ids entry 's-1' at positions 0 and 1"),
    "deeply nested JSON": (_nested(100_000), "DataError", "nested too deeply"),
    "not JSON": ("{oops", "DataError", "not valid JSON"),
}


FAST_FAIL = ["memory.tokenizer=whitespace", "memory.embedder=hashing", "llm.answerer.backend=openai",
             "llm.answerer.base_url=http://127.0.0.1:9/v1", "llm.answerer.max_retries=0", "llm.answerer.timeout_s=1",
             "max_conversations=1", "max_questions_per_conversation=1"]


def _label(tmp_path: Path, capsys: Any, *args: str) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    code = cli.main(["label", f"output_dir={out}", "dataset_format=auto", *FAST_FAIL, *args])
    return code, capsys.readouterr().err, out


@pytest.mark.parametrize("name", sorted(DATA_PROBES))
def test_malformed_data_file_is_a_named_error_with_exit_code_3(tmp_path, capsys, name):
    content, error, needle = DATA_PROBES[name]
    path = tmp_path / "bench.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    code, err, out = _label(tmp_path, capsys, f"data_path={path}")
    assert code == EXIT_DATA, err
    assert f"error: {error}: " in err and needle in err and str(path) in err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback
    assert not out.exists()  # nothing left behind


def test_data_path_that_is_a_directory(tmp_path, capsys):
    code, err, out = _label(tmp_path, capsys, f"data_path={tmp_path}")
    assert code == EXIT_DATA and "is a directory" in err and str(tmp_path) in err and not out.exists()


def test_utf8_bom_is_accepted(tmp_path):
    from tiermem.data.conversations import load_conversations

    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LOCOMO).encode())
    assert [c.conv_id for c in load_conversations(path)] == ["tiny-1"]
    cfg = tmp_path / "bom.yaml"
    cfg.write_bytes(b"\xef\xbb\xbfoutput_dir: x\n")
    from labeling.config import LabelConfig
    from tiermem.settings.config import parse_cli

    assert parse_cli(LabelConfig, [str(cfg)]).output_dir == "x"


# (overrides or config text, exit code, needle); every one must fail before any output exists
CONFIG_PROBES: dict[str, tuple[list[str] | str, int, str]] = {
    "duplicate YAML key": ("output_dir: a\nseed: 1\nseed: 2\n", EXIT_USAGE, "duplicate key 'seed'"),
    "negative max_questions_per_conversation": (["max_questions_per_conversation=-1"], EXIT_USAGE,
                                                "max_questions_per_conversation must be >= 1"),
    "negative max_conversations": (["max_conversations=-2"], EXIT_USAGE, "must be >= 1"),
    "answer_max_tokens=0": (["memory.answer_max_tokens=0"], EXIT_USAGE, "memory.answer_max_tokens must be"),
    "max_units_per_page=-1": (["memory.max_units_per_page=-1"], EXIT_USAGE, "memory.max_units_per_page"),
    "max_concurrency=0": (["llm.answerer.max_concurrency=0"], EXIT_USAGE, "llm.max_concurrency must be"),
    "timeout_s=-1": (["llm.answerer.timeout_s=-1"], EXIT_USAGE, "llm.timeout_s must be > 0"),
    "max_tokens=-5": (["llm.answerer.max_tokens=-5"], EXIT_USAGE, "llm.max_tokens must be"),
    "batch_size=0": (["llm.answerer.batch_size=0"], EXIT_USAGE, "llm.batch_size must be"),
    "memory=5": (["memory=5"], EXIT_USAGE, "memory: expected a mapping of MemoryConfig"),
    "memory=null": (["memory=null"], EXIT_USAGE, "memory: expected a mapping of MemoryConfig"),
    "string for a number": (["seed=abc"], EXIT_USAGE, "seed: expected int"),
    "empty output_dir": (["output_dir="], EXIT_USAGE, "output_dir: empty path"),
    "empty tiers_dir": ("tiers_dir: ' '\n", EXIT_USAGE, "tiers_dir: empty path"),
    "--config without a path": (["--config", "seed=1"], EXIT_USAGE, "--config needs a path"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_PROBES))
def test_malformed_config_is_a_named_error(tmp_path, capsys, monkeypatch, name):
    probe, code, needle = CONFIG_PROBES[name]
    monkeypatch.chdir(tmp_path)  # `output_dir=` must not touch the current directory either
    (tmp_path / "keep.txt").write_text("keep")
    data = tmp_path / "data.json"
    data.write_text(json.dumps(LOCOMO))
    # a probe that wrongly passes must fail fast, not label with a local model: no model, unreachable endpoint
    args = [f"data_path={data}", "dataset_format=auto", *FAST_FAIL]
    if isinstance(probe, str):
        cfg = tmp_path / "probe.yaml"
        cfg.write_text(probe)
        args = ["--config", str(cfg), *args]
    else:
        args = [*args, f"output_dir={tmp_path / 'out'}", *probe] if name != "empty output_dir" else [*args, *probe]
    got = cli.main(["label", *args])
    err = capsys.readouterr().err
    assert got == code, err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["keep.txt", "data.json"] +
                                                               (["probe.yaml"] if isinstance(probe, str) else []))


@pytest.mark.parametrize(("overrides", "needle"), [
    (["port=99999"], "port must be <= 65535, got 99999"),
    (["port=-1"], "port must be >= 0, got -1"),
    (["router.threshold_logit=.nan"], "router.threshold_logit: must be a finite number, got nan"),
    (["router.threshold_logit=high"], "threshold_logit: expected float"),
    (["max_queue=0"], "max_queue must be >= 1"),
])
def test_serve_config_probes_fail_before_serving(capsys, overrides, needle):
    assert cli.main(["serve", "router=always-escalate", *overrides]) == 2
    assert needle in capsys.readouterr().err


def test_api_key_in_api_key_env_is_refused_without_echoing_it(tmp_path, capsys):
    secret = "sk-live-0123456789abcdef"
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", "llm.answerer.backend=openai",
                     f"llm.answerer.api_key_env={secret}"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "NAME of an environment variable" in err
    assert secret not in err and not (tmp_path / "out").exists()


ROUTE_PROBES: list[tuple[Any, int, str]] = [
    ("{" * 50_000 + "}" * 50_000, 400, "not valid JSON"),
    ('{"question": "q", "summaries": [], "threshold_prob": NaN}', 422, "'threshold_prob'"),
    ({"question": 5, "summaries": []}, 422, "'question'"),
    ({"question": "q", "summaries": {"text": "t"}}, 422, "'summaries'"),
    ({"question": "q", "summaries": ["text"]}, 422, "summaries[0]"),
    ({"question": "q", "summaries": [], "threshold_prob": "0.5"}, 422, "'threshold_prob'"),
    ({"question": "q", "summaries": [], "threshold_prob": -0.1}, 422, "'threshold_prob'"),
    ("\xff\xfe", 400, "not valid JSON"),
]


@pytest.mark.parametrize(("body", "status", "needle"), ROUTE_PROBES)
def test_malformed_route_bodies_get_a_4xx_naming_the_field(body, status, needle):
    client = TestClient(create_app(AlwaysEscalate(), ServeConfig(max_body_bytes=200_000)))
    r = (client.post("/route", content=body.encode("latin-1") if body == "\xff\xfe" else body)
         if isinstance(body, str) else client.post("/route", json=body))
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
