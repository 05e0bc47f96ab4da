"""`tiermem-router <stage> --help`: every config key of the stage's dataclass with its default and help text (the
field's `metadata["help"]`, else the comment on or above its line), nested keys listed as overrides name them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

MISSING_DEFAULT = "(required)"


@cache
def _field_comments(cls: type) -> dict[str, str]:
    """field name -> the comment on its line, or the comment block just above it, in `cls`'s source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a built or compiled class): no comment help
        return {}
    comments: dict[int, str] = {}  # line -> comment text
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(tok.start[0])
    out: dict[str, str] = {}
    body = ast.parse(source).body[0]
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        line, end = node.lineno, node.end_lineno or node.lineno
        trailing = [comments[n] for n in range(line, end + 1) if n in comments]
        above: list[str] = []
        n = line - 1
        while n in comments and n not in code_lines:  # a full-line comment block directly above the field
            above.insert(0, comments[n])
            n -= 1
        text = " ".join(above + trailing).replace("noqa", "").strip()
        if text:
            out[node.target.id] = text
    return out


def _help_of(cls: type, f: dataclasses.Field) -> str:
    text = f.metadata.get("help") if f.metadata else None
    if text:
        return str(text)
    for klass in getattr(cls, "__mro__", (cls,)):  # a field inherited from a base dataclass
        if dataclasses.is_dataclass(klass) and f.name in _field_comments(klass):
            return _field_comments(klass)[f.name]
    return ""


def _type_name(tp: Any) -> str:
    if typing.get_origin(strip_optional(tp)) is typing.Literal:  # a choice: its values
        return "|".join(map(str, typing.get_args(strip_optional(tp)))) + (" | None" if strip_optional(tp) != tp else "")
    text = getattr(tp, "__name__", None) if not typing.get_args(tp) else None
    return text or str(tp).replace("typing.", "")


def _show(value: Any) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def config_keys(cls: type, values: Any = None, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) per leaf key of `cls`; defaults from `values` (the stage's config) if given."""
    hints = typing.get_type_hints(cls)
    rows: list[tuple[str, str, str, str]] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if values is not None:
            default: Any = getattr(values, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = MISSING_DEFAULT
        tp = hints.get(f.name, f.type)
        base = strip_optional(tp)
        key = prefix + f.name
        if dataclasses.is_dataclass(base) and isinstance(base, type) and (
                default is None or dataclasses.is_dataclass(default)):
            section_help = _help_of(cls, f)
            if default is None:  # an optional section left out by default: listed as one key
                rows.append((key, _type_name(tp), "None", section_help))
                if f.default_factory is not dataclasses.MISSING:  # on in the class, off in the config applied:
                    rows += config_keys(base, None, key + ".")  # any of its keys turns it back on
                continue
            nested = config_keys(base, default, key + ".")
            if section_help:
                nested.insert(0, (key, "section", "", section_help))
            rows += nested
            continue
        rows.append((key, _type_name(tp), _show(default), _help_of(cls, f)))
    return rows


def strip_optional(tp: Any) -> Any:
    """`X | None` -> X (the type a config key holds when it is set); any other type as it is."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def render_help(stage: str, cls: type, default_config: str | Path | None = None, values: Any = None) -> str:
    """The text `tiermem-router <stage> --help` prints."""
    lines = [f"usage: tiermem-router {stage} [--config PATH | PATH.yaml] [key=value ...]", ""]
    doc = (inspect.getdoc(cls) or "").strip()
    if doc and not doc.startswith(cls.__name__ + "("):  # dataclasses get a generated signature as their doc
        lines += [doc, ""]
    source = (f"defaults: {cls.__name__}, with {default_config} applied" if values is not None and default_config
              else f"defaults: {cls.__name__}")
    lines += [f"config keys ({source}; `key=value` overrides any of them, nested keys with dots):", ""]
    for key, type_name, default, text in config_keys(cls, values):
        if type_name == "section":
            lines.append(f"  {key}.*  {text}")
            continue
        lines.append(f"  {key} ({type_name}, default: {default})")
        if text:
            lines += [f"      {line}" for line in textwrap.wrap(text, 100)]
    return "\n".join(lines)
