"""Two eval.json files compared key by key, timings and local paths aside: what a refactor that must not change
behaviour is checked with (`make demo` before and after, then
`python -m benchmarks.compare_eval before/runs/eval/eval.json after/runs/eval/eval.json`). Exit 0 when every other
leaf value is equal, 1 otherwise; each difference is printed with its key path. Equal means the same JSON type and
value (`true` is not `1`, `1` is not `1.0`) or NaN on both sides (a metric that is NaN in both runs did not change).
An input that is no eval.json (missing, a directory, not UTF-8, not JSON, nested too deeply, not an object) is a
DataError naming the file, exit 3: never read as "they differ"."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from tiermem.data.textfile import read_json_file
from tiermem.settings.errors import EXIT_DATA, DataError

# wall-clock timings and the local path read: they differ between any two runs
IGNORED = re.compile(r"(latency_s|wall_s|seconds|data_path)$")


def differences(a: Any, b: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """(key path, left, right) of every leaf that differs, or that one side lacks, keys matching IGNORED aside."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if IGNORED.search(str(key)):
                continue
            if key not in a or key not in b:
                out.append((f"{where}.{key}", a.get(key, "<missing>"), b.get(key, "<missing>")))
            else:
                out += differences(a[key], b[key], f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [(where, f"{len(a)} items", f"{len(b)} items")]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if same(a, b) else [(where, a, b)]


def same(a: Any, b: Any) -> bool:
    """Two leaves equal as JSON values: the same type and value, or NaN on both sides."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def leaves(a: Any) -> int:
    if isinstance(a, dict):
        return sum(leaves(v) for k, v in a.items() if not IGNORED.search(str(k)))
    if isinstance(a, list):
        return sum(leaves(v) for v in a)
    return 1


def read_eval(path: str) -> dict[str, Any]:
    doc = read_json_file(path, DataError, "eval.json")
    if not isinstance(doc, dict) or not doc:
        raise DataError(f"{path}: holds {'an empty object' if doc == {} else type(doc).__name__}, not an eval.json")
    return doc


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.compare_eval BEFORE.json AFTER.json", file=sys.stderr)
        return 2
    try:
        before, after = (read_eval(path) for path in argv)
    except DataError as exc:
        print(f"compare_eval: error: DataError: {exc}", file=sys.stderr)
        return EXIT_DATA
    found = differences(before, after)
    print(f"{leaves(before)} values compared, {len(found)} differ")
    for path, left, right in found:
        print(f"{path}: {str(left)[:100]!s} | {str(right)[:100]!s}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
