"""Errors that tell a bug from bad input: only the named error kinds (and an unreachable endpoint) map
to the exit codes of bad input; any other exception is an internal error, reported with its traceback, a line
saying so, and EXIT_INTERNAL."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import labeling.run
from tiermem.settings import errors
from tiermem.settings.config import from_dict
from tiermem.settings.errors import (
    EXIT_DATA,
    EXIT_INTERNAL,
    EXIT_USAGE,
    ConfigError,
    DataError,
    MissingFileError,
    UsageError,
    exit_code,
    stage_main,
)
from tiermem_cli import cli

ROOT = Path(__file__).resolve().parents[3]
INTERNAL = "internal error (a bug, please report it with the traceback above)"


def _stage(exc: Exception):
    @stage_main("probe")
    def main(argv: list[str]) -> int:
        raise exc

    return main


def test_exit_internal_is_its_own_code():
    named = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and k != "EXIT_INTERNAL"}
    assert EXIT_INTERNAL == 70 and EXIT_INTERNAL not in named


def test_an_internal_value_error_in_a_stage_gives_its_traceback_and_exit_70(capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    code = _stage(ValueError("zip() argument 2 is shorter than argument 1"))([])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in err and "ValueError: zip() argument 2 is shorter" in err
    assert err.rstrip().splitlines()[-1] == f"tiermem-router probe: {INTERNAL}"


@pytest.mark.parametrize("exc", [KeyError("qid"), FileNotFoundError("/tmp/x.json"), PermissionError("denied"),
                                 TypeError("unsupported operand"), AssertionError("invariant")])
def test_other_plain_exceptions_are_internal_errors_too(exc, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    assert exit_code(exc) is None
    assert _stage(exc)([]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith(INTERNAL)


@pytest.mark.parametrize("exc, code, line", [
    (ConfigError("config.yaml: seed: expected int, got 'abc'"), EXIT_USAGE,
     "tiermem-router probe: error: config.yaml: seed: expected int, got 'abc'"),
    (UsageError("router x has no model"), EXIT_USAGE, "tiermem-router probe: error: UsageError: router x has no model"),
    (MissingFileError("benchmark file not found: /d/x.json"), EXIT_USAGE,
     "tiermem-router probe: error: MissingFileError: benchmark file not found: /d/x.json"),
    (DataError("/d/x.json: conversation 0: field 'turns' is empty"), EXIT_DATA,
     "tiermem-router probe: error: DataError: /d/x.json: conversation 0: field 'turns' is empty"),
])
def test_a_named_error_is_one_line_and_its_exit_code(exc, code, line, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    assert _stage(exc)([]) == code
    assert capsys.readouterr().err.splitlines() == [line]


def test_tiermem_debug_keeps_the_traceback_for_every_error(monkeypatch):
    monkeypatch.setenv("TIERMEM_DEBUG", "1")
    with pytest.raises(DataError, match="bad shape"):
        _stage(DataError("bad shape"))([])
    with pytest.raises(ValueError, match="a bug"):
        _stage(ValueError("a bug"))([])


def test_an_internal_error_traceback_is_redacted(capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    assert _stage(RuntimeError("POST http://me:s3cret@host/v1 failed"))([]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "s3cret" not in err and "http://***@host/v1" in err


def test_a_missing_user_file_is_still_a_file_not_found_error_with_exit_2():
    exc = MissingFileError("label data not found: x")
    assert isinstance(exc, FileNotFoundError) and exit_code(exc) == EXIT_USAGE


# ---- through the real entry point --------------------------------------------------------------------------------


def test_cli_internal_error_inside_the_label_stage_is_exit_70(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)

    def broken(*args, **kwargs):
        return [*zip([1, 2], [1], strict=True)]  # a bug of ours: raises ValueError

    monkeypatch.setattr(labeling.run, "load_conversations", broken)
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", "memory.tokenizer=whitespace"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL, err
    assert "Traceback" in err and "ValueError: zip() argument 2 is shorter than argument 1" in err
    assert err.rstrip().splitlines()[-1] == f"tiermem-router label: {INTERNAL}"


def test_cli_config_error_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", "label_rule=majority"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_USAGE and len(err) == 1 and "label_rule must be one of" in err[0]
    assert err[0].startswith("tiermem-router label: error: ") and "Traceback" not in err[0]


def test_cli_config_validation_of_a_section_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", "split.ratios=[1, 2]"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_USAGE and len(err) == 1 and "split.ratios must be 3 non-negative numbers" in err[0]


def test_cli_data_error_is_one_line_exit_3(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    data = tmp_path / "conversations.json"
    data.write_text("{oops")
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", f"data_path={data}", "memory.tokenizer=whitespace"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_DATA and len(err) == 1 and "DataError" in err[0] and str(data) in err[0]


def test_cli_missing_data_file_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIERMEM_DEBUG", raising=False)
    missing = tmp_path / "missing.json"
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", f"data_path={missing}", "memory.tokenizer=whitespace"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_USAGE and len(err) == 1 and str(missing) in err[0] and "Traceback" not in err[0]


# ---- config validation and the module's own imports --------------------------------------------------------------


@dataclasses.dataclass
class _Section:
    n: int = 1

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclasses.dataclass
class _Config:
    section: _Section = dataclasses.field(default_factory=_Section)


def test_a_value_error_from_a_config_dataclass_built_from_user_input_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^config.section: n must be >= 1, got 0$") as err:
        from_dict(_Config, {"section": {"n": 0}})
    assert exit_code(err.value) == EXIT_USAGE


def test_config_error_is_one_class_importable_from_both_modules():
    import tiermem.settings.config

    assert tiermem.settings.config.ConfigError is ConfigError and issubclass(ConfigError, UsageError)


def _project_imports(path: Path) -> set[str]:
    project = {"tiermem", "labeling", "serving", "router_train", "evaluation", "tiermem_cli"}
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." if node.level else node.module or "")
    return {name for name in imported if name == "." or name.split(".")[0] in project}


def test_errors_module_imports_only_the_redaction_rule_which_imports_nothing():
    # errors sits under every module: one more project import could close a circle through it
    assert _project_imports(ROOT / "tiermem" / "settings" / "errors.py") == {"tiermem.text.redact"}
    assert _project_imports(ROOT / "tiermem" / "text" / "redact.py") == set()


def test_redact_still_offers_the_string_rule():
    from tiermem.text.redact import redact_text

    assert redact_text("http://u:p@h/v1 sk-abcdefghijkl") == "http://***@h/v1 ***"


def test_unreachable_endpoint_maps_to_the_network_exit_code():
    import httpx

    assert exit_code(httpx.ConnectError("[Errno 111] Connection refused")) == errors.EXIT_NETWORK
    assert exit_code(KeyError("x")) is None  # unexpected errors keep their traceback
