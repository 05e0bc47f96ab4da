"""The README is a front door that works: every command it shows runs something that exists, every repo path it
names exists, and it stays short.

- Commands: each line of a ```bash / ```sh block, and each inline `make ...` / `tiermem-router ...` span. `make X`:
  X must be a Makefile target; `tiermem-router X`: X must be a stage in tiermem_cli/cli.py's STAGES.
- Paths: backticked spans in the prose, the tokens of those commands (values of key=value too) and the targets of
  relative links. Whatever contains "/" or ends in .py/.yaml/.yml/.md/.json must exist in the repository, unless it
  is a run output (runs/...), outside the repository (../, ~, /...), a URL, a placeholder (<...>, my_..., path/to)
  or a hub id listed in EXTERNAL.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 170
PATH_SUFFIXES = (".py", ".yaml", ".yml", ".md", ".json")
# Names with a "/" that are not repository paths: hub ids and placeholders the README uses on purpose.
EXTERNAL = {"Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct", "org/name", "me/tiermem-router"}
NOT_IN_REPO = ("runs/", ".venv/", "../", "~", "/", "http://", "https://", "$", "-")
PLACEHOLDER_MARKS = ("<", ">", "*", "...", "{", "}", "[", "]", "(", ")", '"', "'", " ", "path/to")
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
SHELL_LANGS = {"bash", "sh", "shell"}


def makefile_targets(makefile: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", makefile, re.M)}


def cli_stages() -> set[str]:
    from tiermem_cli.cli import STAGES

    return set(STAGES)


def _split_commands(line: str) -> list[list[str]]:
    """One shell line -> the argv of each command on it (comments dropped; &&, ||, ; and | separate commands)."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        tokens = line.split()
    commands, current = [], []
    for tok in tokens:
        if tok in ("&&", "||", ";", "|"):
            commands.append(current)
            current = []
        else:
            current.append(tok)
    commands.append(current)
    return [c for c in commands if c]


def shell_lines(text: str) -> list[str]:
    """Every command line of the README's bash/sh blocks, continuation lines joined."""
    lines = []
    for match in FENCE.finditer(text):
        if match.group(1).lower() not in SHELL_LANGS:
            continue
        for line in re.sub(r"\\\n", " ", match.group(2)).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return lines


def prose(text: str) -> str:
    """The README without its fenced blocks."""
    return FENCE.sub("", text)


def inline_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose(text))


def commands(text: str) -> list[list[str]]:
    """argv of every command shown: in shell blocks, and inline spans that start with make or tiermem-router."""
    out = [argv for line in shell_lines(text) for argv in _split_commands(line)]
    for span in inline_spans(text):
        if span.split()[0] in ("make", "tiermem-router"):
            out += _split_commands(span)
    return out


def _first_word(argv: list[str]) -> str | None:
    """The first argument that is neither a flag nor a VAR=value assignment."""
    return next((a for a in argv[1:] if not a.startswith("-") and "=" not in a), None)


def command_problems(text: str, targets: set[str], stages: set[str]) -> list[str]:
    problems = []
    for argv in commands(text):
        word = _first_word(argv)
        if word is None or any(mark in word for mark in ("<", ">")):
            continue  # bare `make`, or a placeholder such as `tiermem-router <stage>`
        if argv[0] == "make" and word not in targets:
            problems.append(f"`{' '.join(argv)}`: no Makefile target {word!r}")
        if argv[0] == "tiermem-router" and word not in stages:
            problems.append(f"`{' '.join(argv)}`: no CLI stage {word!r} in tiermem_cli/cli.py STAGES")
    return problems


def _candidates(text: str) -> list[str]:
    tokens = [tok for argv in commands(text) for tok in argv]
    for span in inline_spans(text):
        tokens += span.split() if " " in span else [span]
    tokens += re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", prose(text))  # [text](target) and ![alt](target)
    out = []
    for tok in tokens:
        while re.fullmatch(r"[A-Za-z_][\w.]*=.*", tok):  # key=value: the value may be a path, or more of them
            tok = tok.split("=", 1)[1]                   # (ARGS="data=runs/x output_dir=y")
            if " " in tok.strip():
                tokens += tok.split()
                tok = ""
        out.append(tok.strip().rstrip(",.;:"))
    return out


def looks_like_repo_path(tok: str) -> bool:
    if not tok or ("/" not in tok and not tok.endswith(PATH_SUFFIXES)):
        return False
    if re.fullmatch(r"\.\w+", tok):  # a bare extension (".json")
        return False
    if tok in EXTERNAL or tok.startswith(NOT_IN_REPO) or tok.startswith("my_"):
        return False
    return not any(mark in tok for mark in PLACEHOLDER_MARKS)


def path_problems(text: str, root: Path = ROOT) -> list[str]:
    missing = sorted({tok for tok in _candidates(text) if looks_like_repo_path(tok) and not (root / tok).exists()})
    return [f"{tok}: named in the README, not in the repository" for tok in missing]


def all_problems(text: str, targets: set[str], stages: set[str], root: Path = ROOT) -> dict[str, list[str]]:
    n_lines = len(text.splitlines())
    return {
        "length": [f"{n_lines} lines (at most {MAX_LINES})"] if n_lines > MAX_LINES else [],
        "commands": command_problems(text, targets, stages),
        "paths": path_problems(text, root),
    }


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _targets() -> set[str]:
    return makefile_targets((ROOT / "Makefile").read_text())


# ---------------------------------------------------------------------------------------------- the README


def test_the_readme_is_at_most_170_lines():
    assert len(_readme().splitlines()) <= MAX_LINES


def test_every_command_the_readme_shows_exists():
    assert commands(_readme()), "the README shows no command"
    assert command_problems(_readme(), _targets(), cli_stages()) == []


def test_every_repo_path_the_readme_names_exists():
    assert path_problems(_readme()) == []


def test_the_readme_shows_install_demo_and_ask():
    shown = {" ".join(argv[:2]) for argv in commands(_readme())}
    assert {"make install", "make demo", "tiermem-router ask"} <= shown


# ---------------------------------------------------------------------------------------------- the checker


FAKE = """# fake

```bash
make install
make bogus-target ARGS="x=1"
tiermem-router ask data=tiermem/data/example_tiermem.json question="What?"
tiermem-router frobnicate --config configs/nowhere/missing.yaml
cd somewhere && make demo   # a comment naming docs/never.md is ignored
```

Prose with `docs/results.md`, `docs/missing.md`, `runs/eval/eval.md`, `Qwen/Qwen3-0.6B`, `configs/<stage>/`,
`my_agent.jsonl`, `../shared/data/x.json`, [a link](docs/gone.md) and `make sft CONFIG=configs/sft/nope.yaml`.
"""


def test_the_checker_finds_a_bogus_target_stage_and_path():
    found = all_problems(FAKE + "\n" * MAX_LINES, _targets(), cli_stages())
    assert found["length"]
    assert len(found["commands"]) == 2
    assert "'bogus-target'" in found["commands"][0] and "'frobnicate'" in found["commands"][1]
    assert sorted(p.split(":")[0] for p in found["paths"]) == [
        "configs/nowhere/missing.yaml", "configs/sft/nope.yaml", "docs/gone.md", "docs/missing.md"]


def test_the_checker_passes_a_good_readme():
    good = "```sh\nmake demo\ntiermem-router eval --config configs/eval/default.yaml\n```\nSee `docs/results.md`.\n"
    assert all_problems(good, _targets(), cli_stages()) == {"length": [], "commands": [], "paths": []}
