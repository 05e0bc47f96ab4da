"""The house rules of the package layout (docs/DESIGN.md, "Layout"): each package is a floor, a module imports only
from its own floor or the floors below, and no set of modules imports itself in a circle. The ground floor
(tiermem/) is laid out in rooms by the same rule, and holds no module outside them. Every import counts, including
the ones inside functions (lazy imports run too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["tiermem", "labeling", "serving", "router_train", "evaluation", "tiermem_cli"]  # ground floor first
# tiermem's rooms, lowest first: how text is matched, settings and errors, how runs are kept, models, conversations,
# LLM clients, the memory runtime. contract.py and stats.py stay loose and count as rooms of their own.
ROOMS = ["text", "stats", "settings", "contract", "runs", "models", "data", "llm", "memory"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
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


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for floor in FLOORS for p in (ROOT / floor).rglob("*.py")}
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


def _place(module: str) -> tuple[int, int]:
    """(floor, room): the room counts only on the ground floor; its package's own __init__ sits below every room."""
    floor, _, rest = module.partition(".")
    room = ROOMS.index(rest.split(".")[0]) if floor == FLOORS[0] and rest else -1
    return FLOORS.index(floor), room


def test_no_import_runs_up_a_floor_or_a_room():
    graph = _graph()
    loose = sorted(m for m in graph if m.startswith(f"{FLOORS[0]}.") and m.split(".")[1] not in ROOMS)
    assert loose == []  # every ground-floor module lives in a room
    upward = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if _place(t) > _place(m))
    assert upward == []


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


def test_the_checker_sees_an_upward_import(tmp_path):
    # The check must be able to fail: a lazy import inside a function is found and resolved to its module.
    path = tmp_path / "tiermem" / "x.py"
    path.parent.mkdir()
    path.write_text("def f():\n    from serving.router import build\n    from . import contract\n")
    assert _imports(path, "tiermem.x") == {"serving.router.build", "serving.router", "tiermem.contract", "tiermem"}
