"""The house rules of the package layout (docs/DESIGN.md, "Layout"): each package is a floor, a module imports only
from its own floor or the floors below, and no set of modules imports itself in a circle. Two floors are laid out in
rooms by the same rule, and hold no module outside them: the ground floor (tiermem/), its rooms one above the other,
and router_train/, its rooms side by side: the reader (reader/), the language-model router (lm/) and the features
router's fit (fit_features.py) share nothing but the floors below, so none imports another. Every import counts,
including the ones inside functions (lazy imports run too)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["tiermem", "labeling", "serving", "router_train", "evaluation", "tiermem_cli"]  # ground floor first
# A floor's rooms, lowest first: a module imports from its own room or a room listed before it. Rooms in one tuple
# sit side by side: none imports another. A loose module listed here is a room of its own.
ROOMS: dict[str, list[str | tuple[str, ...]]] = {
    # how text is matched, settings and errors, how runs are kept, models, conversations, LLM clients, the memory
    # runtime; contract.py, rewards.py and stats.py stay loose
    "tiermem": ["text", "stats", "settings", "contract", "rewards", "runs", "models", "data", "llm", "memory"],
    # the reader (pre-training, the unit reader router, ask's answer floors), SFT and GRPO, the features router
    "router_train": [("reader", "lm", "fit_features")],
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> set[str]:
    """Project modules that `path` imports (resolved to the deepest existing module)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        out.update(n for n in names if n.split(".")[0] in FLOORS)
    return out


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for floor in FLOORS for p in (root / floor).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in _imports(path, module):
            while name and name not in files:  # `from pkg.mod import func` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _room(module: str) -> tuple[int, int, str]:
    """(floor, rank, room): the rank and room count only on a floor laid out in rooms (rooms side by side share a
    rank); its package's own __init__ sits below every room."""
    floor, _, rest = module.partition(".")
    room = rest.split(".")[0]
    for rank, row in enumerate(ROOMS.get(floor, [])):
        if room in (row if isinstance(row, tuple) else (row,)):
            return FLOORS.index(floor), rank, room
    return FLOORS.index(floor), -1, ""


def loose_modules(graph: dict[str, set[str]]) -> list[str]:
    """Modules of a floor laid out in rooms that live in none of them."""
    return sorted(m for m in graph if m.partition(".")[0] in ROOMS and "." in m and _room(m)[1] < 0)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """`module -> target` for each import up a floor, up a room, or across to a room beside its own."""
    out = []
    for module, targets in graph.items():
        floor, rank, room = _room(module)
        for target in targets:
            t_floor, t_rank, t_room = _room(target)
            sideways = (t_floor, t_rank) == (floor, rank) and rank >= 0 and t_room != room
            if (t_floor, t_rank) > (floor, rank) or sideways:
                out.append(f"{module} -> {target}")
    return sorted(out)


def test_no_import_runs_up_a_floor_or_a_room():
    graph = _graph()
    assert loose_modules(graph) == []  # every module of tiermem/ and router_train/ lives in a room
    assert upward_imports(graph) == []


def test_no_import_circle_between_modules():
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def _copy_of_the_floors(root: Path) -> Path:
    for floor in FLOORS:
        for path in (ROOT / floor).rglob("*.py"):
            target = root / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return root


def test_the_checker_sees_an_upward_import_and_a_loose_module(tmp_path):
    # The check must be able to fail: a lazy import inside a function is found and resolved to its module.
    path = tmp_path / "x" / "tiermem" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text("def f():\n    from serving.router import build\n    from . import contract\n")
    assert _imports(path, "tiermem.x") == {"serving.router.build", "serving.router", "tiermem.contract", "tiermem"}
    # Planted in a copy of the tree: a module of router_train/ outside its rooms, a reader module reaching into the
    # LM router's room beside it and up to evaluation/, a ground-floor room importing one above it.
    root = _copy_of_the_floors(tmp_path / "copy")
    (root / "router_train" / "stray.py").write_text('"""In no room."""\n')
    (root / "router_train" / "reader" / "planted.py").write_text(
        "def f():\n    from router_train.lm.rows import build_rows\n    from evaluation import calibrate\n")
    (root / "tiermem" / "text" / "planted.py").write_text("from tiermem.models import specs\n")
    graph = _graph(root)
    assert loose_modules(graph) == ["router_train.stray"]
    assert {"router_train.reader.planted -> router_train.lm.rows",
            "router_train.reader.planted -> evaluation.calibrate",
            "tiermem.text.planted -> tiermem.models.specs"} <= set(upward_imports(graph))
    assert all(line.split(" -> ")[0].endswith(".planted") for line in upward_imports(graph))  # and nothing else
