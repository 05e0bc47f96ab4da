"""YAML configs parsed into (nested) dataclasses, with `key=value` overrides; unknown keys are refused with the file
and key named. TRL's own configs are built from a `trainer:` mapping, so TRL validates its fields."""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tiermem.settings.config_help import strip_optional

# ConfigError is defined with the other error kinds; `tiermem.settings.config.ConfigError` still works
from tiermem.settings.errors import ConfigError, HelpShown, stage_main

T = TypeVar("T")
# the checkout the package runs from: where a relative config path is looked up when the working directory lacks it
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-3` as a float (YAML 1.2; PyYAML's 1.1 rules want `1.0e-3` and return the
    string "1e-3") and refuses a key given twice in one mapping (1.1 silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    """YAML with numbers read as the numbers they are and duplicate keys refused (see _Loader)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506  (_Loader is a SafeLoader)


def _yaml_message(exc: yaml.YAMLError) -> str:
    """One line: `line L, column C: problem` (PyYAML's own text spans several lines with a caret)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f"{exc.context}, " if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {context}{exc.problem}"
    return " ".join(str(exc).split())


def config_path(path: str | Path) -> Path:
    """A config file as named, relative to the working directory, else to the checkout (so it loads from anywhere)."""
    path = Path(path).expanduser()
    if path.is_absolute() or path.exists():
        return path
    packaged = PACKAGE_ROOT / path
    return packaged if packaged.is_file() else path


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = config_path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml_load(path.read_text(encoding="utf-8-sig")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_message(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def require_finite(value: Any, where: str) -> Any:
    """`value`, refused when it is or holds a NaN or an infinity: `nan < 0` is False, so a range check lets it through
    to fail deep inside training. Every value from a file or an override passes here, `trainer:` mappings included."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            require_finite(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            require_finite(item, f"{where}.{key}")
    return value


# a field's declared range: `field(default=1, metadata={"ge": 1})`; its choices: a `Literal[...]` type
AT_LEAST_ONE = {"ge": 1}  # a count that must be positive: field(default=8, metadata=AT_LEAST_ONE)
BOUNDS = (("ge", operator.ge, ">="), ("gt", operator.gt, ">"), ("le", operator.le, "<="), ("lt", operator.lt, "<"))


def choices_of(tp: Any) -> tuple[Any, ...] | None:
    """The values a `Literal[...]` (or optional Literal) type allows; None for any other type."""
    base = strip_optional(tp)
    return typing.get_args(base) if typing.get_origin(base) is typing.Literal else None


def check_declared(obj: Any, prefix: str = "") -> None:
    """Every field of dataclass `obj` in its declared range and choices (None where the type allows it), else
    ConfigError naming `prefix` + name. Called from __post_init__, so a config built in Python is checked too."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        choices = choices_of(hints[f.name])
        if choices is not None and value is not None and value not in choices:
            raise ConfigError(f"{key} must be one of {'|'.join(map(str, choices))}, got {value!r}")
        if value is not None and any(name in f.metadata for name, _, _ in BOUNDS):
            require_finite(value, key)  # a range says nothing of an infinity: `inf >= 0` holds
        for name, holds, words in BOUNDS:
            if name in f.metadata and value is not None and not holds(value, f.metadata[name]):
                raise ConfigError(f"{key} must be {words} {f.metadata[name]}, got {value!r}")


def _check_scalar(tp: Any, value: Any, where: str) -> Any:
    if value is None:
        return value
    require_finite(value, where)
    base = strip_optional(tp)
    origin = typing.get_origin(base) or base
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    expected = {int: int, float: float, str: str, bool: bool, list: list, dict: dict, tuple: (list, tuple)}
    kind = expected.get(origin)
    if kind is not None and (not isinstance(value, kind) or (origin is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {getattr(base, '__name__', base)}, got {value!r}")
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    return value


SHORTHAND = "__shorthand__"  # a section given as one string (`router: runs/grpo`), then overridden (`router.mode=...`)

def _expand_shorthand(tp: Any, value: Any, where: str) -> Any:
    """A dataclass with `from_shorthand(str)` (e.g. RouterSpec) may be given as a string."""
    if isinstance(value, str):
        value = {SHORTHAND: value}
    if isinstance(value, dict) and SHORTHAND in value:
        if not hasattr(tp, "from_shorthand"):
            raise ConfigError(f"{where}: expected a mapping of {tp.__name__} settings, got {value[SHORTHAND]!r}")
        try:
            base = dataclasses.asdict(tp.from_shorthand(value[SHORTHAND]))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        value = {**base, **{k: v for k, v in value.items() if k != SHORTHAND}}
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = strip_optional(hints[name])
        if name.endswith("_dir") and isinstance(value, str) and not value.strip():
            # an empty directory means the current one: a stage would write (and clean up) there
            raise ConfigError(f"{where}.{name}: empty path; give a directory (or null where allowed)")
        if dataclasses.is_dataclass(tp) and hasattr(tp, "from_shorthand"):
            value = _expand_shorthand(tp, value, f"{where}.{name}")
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            kwargs[name] = from_dict(tp, value, f"{where}.{name}")
        elif dataclasses.is_dataclass(tp) and not (value is None and tp is not hints[name]):
            # e.g. `memory=5` or `memory=null` for a section that is not optional
            raise ConfigError(f"{where}.{name}: expected a mapping of {tp.__name__} settings, got {value!r}")
        elif value is None and not _nullable(hints[name]):
            # a dataclass would take it and a later truth test read it as false, a number check raise on it
            raise ConfigError(f"{where}.{name}: null is not a value of this key (it takes "
                              f"{getattr(tp, '__name__', tp)}); leave the key out for its default")
        else:
            kwargs[name] = _check_scalar(hints[name], value, f"{where}.{name}")
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        # __post_init__ judges the user's values: what it refuses is a config error, exit 2 (a ValueError named here)
        raise ConfigError(f"{where}: {exc}") from None
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    """The config as plain data, credentials removed (this is what config.yaml and fingerprints record)."""
    from tiermem.text.redact import redact

    return redact(dataclasses.asdict(obj))


def _key_type(cls: type | None, parts: list[str]) -> Any:
    """The declared type of dotted key `parts` in `cls`; None inside a free mapping (`trainer:`) or unknown."""
    tp: Any = cls
    for part in parts:
        tp = strip_optional(tp)
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            return None
        hints = typing.get_type_hints(tp)
        if part not in hints:
            return None
        tp = hints[part]
    return tp


def _is_text(tp: Any) -> bool:
    """A key of free text: `str`, `str | int` (ask's question: an id or words) or a `Literal` of strings."""
    if choices_of(tp) is not None:
        return all(isinstance(c, str) for c in choices_of(tp))
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) in (
        typing.Union, types.UnionType) else [tp]
    return str in args and all(a in (str, int) for a in args)


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _nullable(tp: Any) -> bool:
    """A key that may be null: declared `X | None`, or of any type."""
    return tp is Any or tp is type(None) or _is_optional(tp)


def apply_overrides(data: dict[str, Any], overrides: list[str], where: str = "overrides",
                    cls: type | None = None) -> dict[str, Any]:
    """`a.b=value` overrides. A key declared as text takes the value as written ("Tomas: when?", "dog #2", "- what?"
    are no YAML mapping, comment or list; `null`/`~`: None where allowed); others parse as YAML scalars (`k=[a,b]`)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{where}: expected key=value, got {item!r}")
        key, raw = item.split("=", 1)
        tp = _key_type(cls, key.strip().split("."))
        try:
            if tp is not None and _is_text(tp):
                value = None if raw in ("null", "~") and _is_optional(tp) else raw
            else:
                value = yaml_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: {key}: value {raw!r} is not valid YAML: {_yaml_message(exc)}") from None
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if isinstance(node.get(part), str):  # a shorthand section overridden key by key
                node[part] = {SHORTHAND: node[part]}
            if part in node and node[part] is None:  # a section the config leaves out: its defaults, plus the key
                node[part] = {}
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: {key!r} goes through a non-mapping value")
        node[parts[-1]] = value
    return data


def parse_config(cls: type[T], path: str | Path | None = None, overrides: list[str] = ()) -> T:
    data = load_yaml(path) if path else {}
    where = str(path) if path else cls.__name__
    data = apply_overrides(data, list(overrides), where=f"{where} (overrides)", cls=cls)
    return from_dict(cls, data, where)


def parse_cli(cls: type[T], argv: list[str], default_config: str | Path | None = None) -> T:
    """`[--config PATH | PATH.yaml] [key=value ...]` -> dataclass instance."""
    path: str | Path | None = default_config
    overrides: list[str] = []
    args = list(argv)
    if any(a in ("-h", "--help") for a in args):
        raise HelpShown(lambda stage: _help(stage, cls, default_config))
    while args:
        arg = args.pop(0)
        if arg in ("--config", "-c"):
            if not args or "=" in args[0] or args[0].startswith("-"):
                raise ConfigError(f"{arg} needs a path (got {args[0] if args else 'nothing'!r})")
            path = args.pop(0)
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg.endswith((".yaml", ".yml")) and "=" not in arg:
            path = arg
        else:
            overrides.append(arg)
    return parse_config(cls, path, overrides)


def _help(stage: str, cls: type, default_config: str | Path | None) -> str:
    """The stage's --help: the defaults with its default config applied when that config loads."""
    from tiermem.settings.config_help import render_help

    values = None
    if default_config and config_path(default_config).is_file():
        try:
            values = parse_config(cls, default_config)
        except (ConfigError, ValueError, OSError):
            values = None
    return render_help(stage, cls, default_config, values)


def check_field_types(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """Type-check `data` against dataclass `cls` (e.g. TRL's SFTConfig) before it is built: libraries often accept a
    wrong type at construction and fail deep inside training (`learning_rate="1e-3"` reaches AdamW as a string)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # forward references a library did not make resolvable: check what is resolvable
        hints = {f.name: f.type for f in dataclasses.fields(cls) if isinstance(f.type, type)}
    out = dict(data)
    for name, value in data.items():
        tp = strip_optional(hints.get(name))
        if tp in (int, float, bool, str):
            out[name] = _check_scalar(tp, value, f"{where}.{name}")
    return out


def json_stage(stage: str, cls: type[T], run: Callable[[T], dict[str, Any]]) -> Callable[[list[str] | None], int]:
    """The `main(argv)` of a stage that prints its config and `run(cfg)`'s result as JSON."""

    @stage_main(stage)
    def main(argv: list[str]) -> int:
        cfg = parse_cli(cls, argv, default_config=None)
        print(json.dumps({"config": dataclasses.asdict(cfg), **run(cfg)}, indent=2))
        return 0

    return main
