"""JSON Schema export of the declarative models (the files in the repository's ``schemas/``).

Models are registered by file name; other modules add theirs with :func:`register_schema`
(e.g. the tuning record). The registry imports models lazily, so registering costs nothing.
``tilecraft schemas export [DIR]`` writes them; ``tests/test_schemas.py`` fails when the
committed files are stale.

>>> "target_spec.json" in schema_names()
True
>>> schema_text("memory_hierarchy.json").startswith("{")
True
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from pydantic import BaseModel

from tilecraft.errors import TargetError

#: file name -> a pydantic model, or "module:ClassName" of one (imported when needed)
_SCHEMAS: dict[str, str | type[BaseModel]] = {
    "target_spec.json": "tilecraft.target.spec:TargetSpec",
    "memory_hierarchy.json": "tilecraft.target.memory:MemoryHierarchy",
    "intrinsic.json": "tilecraft.target.intrinsic:IntrinsicDecl",
    "intrinsic_set.json": "tilecraft.target.intrinsic:IntrinsicSet",
    "micro_kernel.json": "tilecraft.target.microkernel:MicroKernelDecl",
}

EXPORT_COMMAND = "tilecraft schemas export schemas/"


def register_schema(file_name: str, model: str | type[BaseModel]) -> None:
    """Export ``model`` (a class or ``"module:ClassName"``) as ``file_name``."""
    if not file_name.endswith(".json") or "/" in file_name:
        raise TargetError(f"schema file name {file_name!r} must be a plain name ending in .json")
    _SCHEMAS[file_name] = model


def schema_names() -> list[str]:
    return sorted(_SCHEMAS)


def schema_model(file_name: str) -> type[BaseModel]:
    if file_name not in _SCHEMAS:
        raise TargetError(f"no schema {file_name!r}; the schemas are {', '.join(schema_names())}")
    model = _SCHEMAS[file_name]
    if isinstance(model, type):
        return model
    module_name, _, class_name = model.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def schema_text(file_name: str) -> str:
    """The JSON Schema of the model exported as ``file_name``, as committed (stable text)."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              **schema_model(file_name).model_json_schema()}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def export_schemas(directory: str | Path) -> list[Path]:
    """Write every registered schema into ``directory``; returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in schema_names():
        path = directory / name
        path.write_text(schema_text(name), encoding="utf-8")
        written.append(path)
    return written


def default_schema_dir() -> Path:
    """``schemas/`` next to the ``core/`` folder in a source checkout, else ``./schemas``."""
    import tilecraft

    checkout = Path(tilecraft.__file__).resolve().parent.parent / "schemas"
    return checkout if checkout.is_dir() else Path.cwd() / "schemas"
