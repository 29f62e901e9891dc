"""The base of every declarative spec model, and readable messages for invalid declarations.

Spec models are pydantic v2 models: frozen, ``extra="forbid"``, strict on scalars (``"3"`` is
not an int, ``True`` is not an int, ``1.5`` is not an int). Sequences and enums are lax, so a
declaration may be written with lists and plain strings, in YAML or in Python alike.

A validation failure becomes one :class:`~tilecraft.errors.PluginError` that lists every bad
field by its path (``memory.levels[1] (L1).size_bytes``), with its YAML line when the
declaration came from a file.

>>> class Point(SpecModel):
...     x_bytes: int
>>> try:
...     Point(x_bytes="3")
... except PluginError as err:
...     print(err)
invalid Point:
  x_bytes: Input should be a valid integer (got '3')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Strict, ValidationError

from tilecraft.errors import PluginError

T = TypeVar("T")

#: a tuple field that also accepts a list (YAML and Python literals); items keep their strictness
Seq = Annotated[tuple[T, ...], Strict(False)]
#: a field that accepts its enum's value as a plain string
Lax = Annotated[T, Strict(False)]

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _SpecModelMeta(type(BaseModel)):  # type: ignore[misc]
    """Turns a failed construction ``Model(...)`` into a :class:`PluginError`.

    Done in the metaclass, not in ``__init__``: pydantic calls a custom ``__init__`` for nested
    models too, which would cut the field path short."""

    def __call__(cls, *args: Any, **data: Any) -> Any:
        try:
            return super().__call__(*args, **data)
        except ValidationError as err:
            raise PluginError(validation_message(err, what=cls.__name__, data=data)) from err


class SpecModel(BaseModel, metaclass=_SpecModelMeta):
    """Frozen, extra="forbid", strict; raises :class:`PluginError` instead of pydantic's error."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def check_identifier(value: str, what: str) -> str:
    """``value`` if it is a Python-style identifier, else a ValueError naming ``what``."""
    if not IDENTIFIER.match(value):
        raise ValueError(f"{what} {value!r} is not a valid name; use letters, digits and _, "
                         "not starting with a digit")
    return value


def check_unique(names: Sequence[str], what: str) -> None:
    """A ValueError naming the first duplicate of ``names``."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} {name!r} is declared twice; names must be unique")
        seen.add(name)


# error formatting ---------------------------------------------------------------------------

_TYPE_TAGS = re.compile(r"^(int|float|str|bool|none|list|tuple|dict|json-or-python\[.*\]|"
                        r"function-.*|lax-.*|strict-.*|is-instance\[.*\]|enum\[.*\]|"
                        r"tagged-union\[.*\]|union\[.*\]|chain\[.*\]|literal\[.*\])$")


def _is_type_tag(part: Any) -> bool:
    return isinstance(part, str) and (bool(_TYPE_TAGS.match(part)) or part[:1].isupper())


def _format_path(loc: Sequence[Any], data: Any) -> tuple[str, list[Any]]:
    """``('levels', 1, 'size_bytes')`` -> ``'levels[1] (L1).size_bytes'`` and the data path."""
    text = ""
    path: list[Any] = []
    node = data
    for part in loc:
        if _is_type_tag(part) and not (isinstance(node, Mapping) and part in node):
            continue  # pydantic's union-member tags carry no information for the reader
        path.append(part)
        if isinstance(part, int):
            text += f"[{part}]"
            item = node[part] if isinstance(node, Sequence) and not isinstance(node, str) \
                and -len(node) <= part < len(node) else None
            name = item.get("name") if isinstance(item, Mapping) else getattr(item, "name", None)
            if isinstance(name, str):
                text += f" ({name})"
            node = item
        else:
            text += f".{part}" if text else str(part)
            if isinstance(node, Mapping):
                node = node.get(part)
            elif isinstance(node, BaseModel):
                node = getattr(node, str(part), None)
            else:
                node = None
    return text, path


def _yaml_lines(text: str) -> Any:
    try:
        return yaml.compose(text)
    except yaml.YAMLError:
        return None


def _line_of(root: Any, path: Sequence[Any]) -> int | None:
    """The 1-based line of the YAML node at ``path`` (or of its nearest existing parent)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    child = value
                    line = key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and 0 <= part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validation_message(err: ValidationError, *, what: str, data: Any = None,
                       source: str | None = None, yaml_text: str | None = None) -> str:
    """One readable message for a pydantic error: a header naming ``what`` (and ``source``),
    then one line per bad field."""
    root = _yaml_lines(yaml_text) if yaml_text is not None else None
    header = f"invalid {what}" + (f" in {source}" if source else "") + ":"
    errors = err.errors(include_url=False)
    by_place: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for error in errors:
        if error["type"] == "too_short" and any(
                len(other["loc"]) > len(error["loc"]) and other["loc"][:len(error["loc"])]
                == error["loc"] for other in errors):
            continue  # "0 items after validation": its items' own errors say why
        path_text, path = _format_path(error["loc"], data)
        message = error["msg"]
        for prefix in ("Value error, ", "Assertion failed, "):
            if message.startswith(prefix):
                message = message[len(prefix):]
        if error["type"] == "extra_forbidden":
            message = "unknown field; remove it or check its spelling against the schema"
        where = path_text
        if root is not None:
            line = _line_of(root, path)
            if line is not None:
                where += f" (line {line})"
        messages = by_place.setdefault(where, [])
        if message not in messages:
            messages.append(message)
        if error["type"] not in ("value_error", "assertion_error", "missing",
                                 "extra_forbidden") and \
                not isinstance(error.get("input"), (Mapping, list, tuple, BaseModel)):
            got[where] = f" (got {_short(error.get('input'))})"
    lines = [header]
    for where, messages in by_place.items():
        lines.append(f"  {where + ': ' if where else ''}{_merge(messages)}{got.get(where, '')}")
    return "\n".join(lines)


def _merge(messages: list[str]) -> str:
    """Union members' errors in one phrase: "Input should be a valid string or integer"."""
    lead = "Input should be a valid "
    if len(messages) > 1 and all(message.startswith(lead) for message in messages):
        kinds = [message[len(lead):] for message in messages]
        return lead + ", ".join(kinds[:-1]) + " or " + kinds[-1]
    return "; ".join(messages)
