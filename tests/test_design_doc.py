"""docs/DESIGN.md names every module of the package, and every module path it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tiermem", "labeling", "serving", "router_train", "evaluation", "tiermem_cli")


def modules(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).rglob("*.py")
                  if p.name != "__init__.py")


def design_text(root: Path) -> str:
    # the "Adding ..." sections show modules a reader would write (examples), not ones that exist
    text = (root / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    return re.sub(r"^## Adding .*?(?=^## |\Z)", "", text, flags=re.M | re.S)


def unnamed_modules(root: Path) -> list[str]:
    """Modules the text names neither by path nor by file name on a line that names their folder."""
    text = design_text(root)
    lines = text.splitlines()
    missing = []
    for mod in modules(root):
        if mod in text:
            continue
        parent, name = mod.rsplit("/", 1)
        folder = parent.rsplit("/", 1)[-1] + "/"
        if not any(f"`{name}`" in line and folder in line for line in lines):
            missing.append(mod)
    return missing


def named_paths_missing(root: Path) -> list[str]:
    text = design_text(root)
    packages = "|".join(PACKAGES)
    named = set(re.findall(rf"(?<![\w/.])((?:{packages})/[\w/]*\w\.py)\b", text))
    return sorted(p for p in named if not (root / p).is_file())


def test_design_names_every_module():
    assert unnamed_modules(ROOT) == []


def test_every_module_path_design_names_exists():
    assert named_paths_missing(ROOT) == []


def test_the_checks_see_a_module_left_out_and_a_path_gone(tmp_path):
    (tmp_path / "docs").mkdir()
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
    (tmp_path / "labeling" / "kept.py").write_text("")
    (tmp_path / "labeling" / "forgotten.py").write_text("")
    (tmp_path / "docs" / "DESIGN.md").write_text(
        "| 1 | `labeling/` | the kept one (`kept.py`), and `labeling/gone.py` |\n"
        "## Adding a stage\n`labeling/example.py`\n")
    assert unnamed_modules(tmp_path) == ["labeling/forgotten.py"]
    assert named_paths_missing(tmp_path) == ["labeling/gone.py"]
