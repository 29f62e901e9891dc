"""The core's own extensions, registered through the same hooks as any plugin.

Core modules are imported only when a hook is called (never when tilecraft is imported). A
core module contributes defaults by listing them in a module attribute, looked up here, and
each kind has its consumer in the compile pipeline:

- passes: ``tilecraft.passes.DEFAULT_PASSES``, run by the graph-passes stage;
- cost_models: ``tilecraft.cost.DEFAULT_COST_MODELS``, asked by the AMOS mapping stage;
- search_engines: ``tilecraft.search.DEFAULT_SEARCH_ENGINES``, run by the tuner;
- operators: the callables of ``tilecraft.ops.__all__``, offered to ``tilecraft compile``
  programs as ``operators``;
- runners: ``tilecraft.runtime.runners.DEFAULT_RUNNERS``, timing the tuner's candidates.

>>> sorted(name for name, _ in DEFAULT_PROVIDERS.values())[:2]
['tilecraft.cost', 'tilecraft.ops']
"""

from __future__ import annotations

import importlib
from typing import Any

from tilecraft.runtime.runners import InProcessRunner
from tilecraft.target.hookspecs import Extension, hookimpl

DEFAULT_PROVIDERS: dict[str, tuple[str, str]] = {
    "passes": ("tilecraft.passes", "DEFAULT_PASSES"),
    "cost_models": ("tilecraft.cost", "DEFAULT_COST_MODELS"),
    "search_engines": ("tilecraft.search", "DEFAULT_SEARCH_ENGINES"),
    "operators": ("tilecraft.ops", "__all__"),
    "runners": ("tilecraft.runtime.runners", "DEFAULT_RUNNERS"),
}


def _defaults(kind: str) -> list[Any]:
    module_name, attribute = DEFAULT_PROVIDERS[kind]
    module = importlib.import_module(module_name)
    values = getattr(module, attribute)
    if attribute == "__all__":
        values = [getattr(module, name) for name in values]
        return [value for value in values if callable(value) and not isinstance(value, type)]
    return list(values)


__all__ = ["DEFAULT_PROVIDERS", "InProcessRunner"]


@hookimpl
def tilecraft_register_passes() -> list[Extension]:
    return _defaults("passes")


@hookimpl
def tilecraft_register_cost_models() -> list[Extension]:
    return _defaults("cost_models")


@hookimpl
def tilecraft_register_search_engines() -> list[Extension]:
    return _defaults("search_engines")


@hookimpl
def tilecraft_register_operators() -> list[Extension]:
    return _defaults("operators")


@hookimpl
def tilecraft_register_runners() -> list[Extension]:
    return _defaults("runners")
