"""docs/probes.md names the test behind each probe: every named test file and test function must exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_the_probe_table_names_exists():
    text = (ROOT / "docs" / "probes.md").read_text()
    last_file = None
    named = []
    for cell in re.findall(r"`([^`]*test_[^`]*)`", text):
        for ref in cell.split(", "):
            match = re.fullmatch(r"(?:(tests/(?:\w+/)*test_\w+\.py))?(?:::(test_\w+))?", ref.strip())
            if not match or not (match.group(1) or match.group(2)):
                continue
            last_file = match.group(1) or last_file
            named.append((last_file, match.group(2)))
    assert len(named) > 20
    for file, func in named:
        path = ROOT / file
        assert path.is_file(), f"docs/probes.md names {file}, which does not exist"
        if func:
            names = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
            assert func in names, f"docs/probes.md names {file}::{func}, which does not exist"
