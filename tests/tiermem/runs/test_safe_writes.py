"""Every file a stage writes goes through tiermem.runs.safe_io (issue 34, class 2): never through a link planted in its
run directory after the claim.

Two checks. A scan of every module of the packages the CLI's stages live in: a write by plain open(), write_text,
a library's save_pretrained / save_model / save_to_disk, torch.save or savefig outside safe_io fails it, naming the
file and line (a new stage, e.g. router_train/reader/pretrain.py, is scanned as soon as it is registered in
tiermem_cli.cli.STAGES or lives in one of these packages). Then links planted mid-run: audit's sheet and the unit
reader's model.safetensors / tokenizer.json are refused (exit 4 / RunDirError) and their targets left as they were.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tiermem.runs import safe_io
from tiermem.runs.rundir import claim_output_dir
from tiermem.settings.errors import RunDirError
from tiermem_cli import cli

ROOT = Path(__file__).resolve().parents[3]
SAFE_IO = ROOT / "tiermem" / "runs" / "safe_io.py"
# calls that write a file by plain open(): pathlib's, the libraries' folder and file writers
WRITER_METHODS = ("write_text", "write_bytes", "save_pretrained", "save_model", "save_to_disk", "savefig",
                  "to_parquet", "to_json", "to_csv")
WRITER_FUNCTIONS = ("torch.save", "os.open", "card.save")
# safe_io's entry points: a writer called inside one of these (a lambda handed to it) writes into a folder or file
# that safe_io made and renames into place
SAFE_CALLS = ("write_atomic", "write_stream", "save_into", "save_pretrained", "move_into")
# (file, call) -> why it is safe although it is not inside a safe_io call
ALLOWED = {
    ("router_train/lm/router_run.py", "trainer.save_model"): "every rank saves into the staging folder the main "
    "process made fresh (sharded saves need the same folder on each rank); safe_io.move_into then renames the files in",
    ("tiermem/data/textfile.py", "os.open"): "a read, never a write: the checked JSON reader opens O_RDONLY with "
    "O_NONBLOCK so a FIFO where a data file should be is named instead of blocking the stage",
}


def _writes_mode(call: ast.Call, mode_index: int) -> bool:
    mode = call.args[mode_index] if len(call.args) > mode_index else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


def is_plain_write(call: ast.Call) -> bool:
    name = ast.unparse(call.func)
    if name == "open":
        return _writes_mode(call, 1)
    if name.endswith(".open") and name not in ("os.open",):
        return _writes_mode(call, 0)
    return name in WRITER_FUNCTIONS or name.rsplit(".", 1)[-1] in WRITER_METHODS and not name.startswith("safe_io.")


def _is_safe_io_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = ast.unparse(node.func)
    return name.removeprefix("safe_io.") in SAFE_CALLS and (name.startswith("safe_io.") or "." not in name)


def plain_writes(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: call` for every write in `path` that is neither a safe_io call nor inside one (a lambda handed
    to write_stream / save_into), nor ALLOWED."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    rel = path.relative_to(root).as_posix()
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not is_plain_write(node):
            continue
        up, inside = parents.get(node), False
        while up is not None and not inside:
            inside, up = _is_safe_io_call(up), parents.get(up)
        if not inside and (rel, ast.unparse(node.func)) not in ALLOWED:
            hits.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return hits


def stage_modules() -> dict[str, Path]:
    """stage -> the file of its main(argv), for every stage of the CLI."""
    out = {}
    for stage, (target, _) in cli.STAGES.items():
        module = target.split(":")[0]
        path = ROOT / (module.replace(".", "/") + ".py")
        out[stage] = path if path.is_file() else ROOT / module.replace(".", "/") / "__init__.py"
    return out


def scanned_files() -> list[Path]:
    """Every module of the packages the stages live in, plus tiermem (which every stage writes through)."""
    packages = {target.split(".")[0] for target, _ in cli.STAGES.values()} | {"tiermem"}
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py") if p != SAFE_IO)


def test_every_stage_module_is_scanned():
    scanned = set(scanned_files())
    missing = {stage: str(p) for stage, p in stage_modules().items() if p not in scanned}
    assert not missing, f"stage module(s) outside the scanned packages: {missing}"
    assert len(scanned) > 50  # the packages were found (a wrong ROOT would scan nothing and pass)


def test_no_stage_module_writes_around_safe_io():
    hits = [hit for path in scanned_files() for hit in plain_writes(path)]
    assert not hits, ("write(s) that would follow a link planted in a run directory; use tiermem.runs.safe_io "
                      "(write_atomic, write_stream, save_pretrained, save_into):\n" + "\n".join(hits))


def test_the_scan_catches_each_kind_of_plain_write(tmp_path):
    """The scan is not vacuous: each way of writing around safe_io is flagged; a safe_io call, a writer handed to
    one, a read, a docstring and a comment are not."""
    bad = ['open(p, "w")', "open(path, 'ab')", 'p.open("w", encoding="utf-8")', "p.write_text(s)",
           "model.save_pretrained(str(out))", "trainer.save_model(out)", "ds.save_to_disk(x)", "torch.save(obj, f)",
           "fig.savefig(path)", "os.open(p, os.O_WRONLY)", "open(p, mode='x')"]
    good = ["safe_io.write_atomic(p, s)", "safe_io.save_pretrained(model, out)", "open(p, encoding='utf-8')",
            "p.read_text()", "write_stream(p, lambda fh: torch.save(obj, fh))",
            "save_into(d, lambda folder: ds.save_to_disk(str(folder)))", '"""call model.save_pretrained(out)"""',
            "# model.save_pretrained(out) in a comment"]
    module = tmp_path / "m.py"
    module.write_text("\n".join(bad + good) + "\n")
    assert [h.split(": ", 1)[1] for h in plain_writes(module, tmp_path)] == [
        ast.unparse(ast.parse(line).body[0].value) for line in bad]


# ---------------------------------------------------------------------------------------------- links planted


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "victim.txt"
    target.parent.mkdir()
    target.write_text("untouched\n")
    return target


def test_save_pretrained_refuses_a_link_planted_in_the_directory(tmp_path):
    class Writer:  # what transformers does: plain open() of fixed names in the folder it is given
        def save_pretrained(self, folder: str) -> None:
            for name in ("model.safetensors", "tokenizer.json"):
                with open(Path(folder) / name, "w") as fh:  # noqa: PTH123
                    fh.write(name)

    victim = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    assert [p.name for p in safe_io.save_pretrained(Writer(), run)] == ["model.safetensors", "tokenizer.json"]
    (run / "tokenizer.json").unlink()
    (run / "tokenizer.json").symlink_to(victim)
    with pytest.raises(RunDirError, match="tokenizer.json is a symbolic link"):
        safe_io.save_pretrained(Writer(), run)
    assert victim.read_text() == "untouched\n"
    assert not [p for p in run.iterdir() if p.name.startswith(".saving.")]  # the staging folder is gone


def _tiny_reader_router(tmp_path: Path):
    from tests.helpers.unit_reader_run import tiny_unit_reader

    return tiny_unit_reader(tmp_path / "tiny")


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_unit_reader_save_refuses_a_link_planted_after_the_claim(tmp_path, name):
    router = _tiny_reader_router(tmp_path)
    victim = _outside(tmp_path)
    run = claim_output_dir(tmp_path / "reader", "unit-reader", lock=False)
    (run / name).symlink_to(victim)
    with pytest.raises(RunDirError, match=f"{name} is a symbolic link"):
        router.save(run, data={}, metrics={}, extra={})
    assert victim.read_text() == "untouched\n" and (run / name).is_symlink()


@pytest.mark.parametrize("name", ["audit.jsonl", "audit.md", "summary.json"])
def test_audit_refuses_a_link_planted_after_the_claim(tmp_path, monkeypatch, capsys, name):
    from labeling import audit
    from tests.helpers.records import rec

    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(rec(f"q{i}", "c1", i % 2 == 0, True, None, "train")) + "\n"
                               for i in range(6)))
    victim = _outside(tmp_path)
    out = tmp_path / "audit"
    sample = audit.sample

    def plant_then_sample(*args, **kwargs):  # runs after the claim, before the sheet is written
        (out / name).symlink_to(victim)
        return sample(*args, **kwargs)

    monkeypatch.setattr(audit, "sample", plant_then_sample)
    assert audit.main([f"data={records}", f"output_dir={out}", "n=4"]) == 4
    assert "is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "untouched\n"
