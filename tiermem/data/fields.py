"""The one getter every loader reads a field of parsed JSON through: the object, the key and the type checked, a
DataError naming `where` and the field otherwise (bool is not taken for int)."""

from __future__ import annotations

from typing import Any

from tiermem.settings.errors import DataError


def get_field(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{where}: missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in as_tuple(kind):
        names = "/".join(t.__name__ for t in as_tuple(kind))
        raise DataError(f"{where}: field '{key}' must be {names}, got {type(value).__name__}")
    return value


def as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
