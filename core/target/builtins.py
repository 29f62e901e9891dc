"""The core's own extensions, registered through the same hooks as any plugin.

Core modules are imported only when a hook is called (never when tilecraft is imported). A
core module contributes defaults by listing them in a module attribute, looked up here:

=============== ====================== ==========================
kind            module                 attribute
=============== ====================== ==========================
passes          tilecraft.passes       ``DEFAULT_PASSES``
cost_models     tilecraft.cost         ``DEFAULT_COST_MODELS``
search_engines  tilecraft.search       ``DEFAULT_SEARCH_ENGINES``
operators       tilecraft.ops          ``__all__`` (its callables)
runners         tilecraft.runtime      ``DEFAULT_RUNNERS``
=============== ====================== ==========================

A module that does not exist yet contributes nothing; one that fails to import is reported
like any broken plugin. The in-process runner below is always there.

>>> runner = InProcessRunner()
>>> calls = []
>>> seconds = runner.run(lambda arrays: calls.append(1), {}, repeat=3)
>>> len(seconds), len(calls)
(3, 4)
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.target.hookspecs import Extension, hookimpl

DEFAULT_PROVIDERS: dict[str, tuple[str, str]] = {
    "passes": ("tilecraft.passes", "DEFAULT_PASSES"),
    "cost_models": ("tilecraft.cost", "DEFAULT_COST_MODELS"),
    "search_engines": ("tilecraft.search", "DEFAULT_SEARCH_ENGINES"),
    "operators": ("tilecraft.ops", "__all__"),
    "runners": ("tilecraft.runtime", "DEFAULT_RUNNERS"),
}


def _defaults(kind: str) -> list[Any]:
    module_name, attribute = DEFAULT_PROVIDERS[kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            return []  # the module is not written yet
        raise
    values = getattr(module, attribute, ())
    if attribute == "__all__":
        values = [getattr(module, name) for name in values]
        return [value for value in values if callable(value) and not isinstance(value, type)]
    return list(values)


class InProcessRunner:
    """Runs a kernel function in this process and times each call (no isolation: a crashing
    kernel takes the process down; use an isolated runner for untrusted candidates)."""

    name = "in_process"

    def run(self, function: Any, arrays: Mapping[str, np.ndarray], *, repeat: int = 3,
            warmup: int = 1) -> list[float]:
        """Seconds of each of ``repeat`` calls, after ``warmup`` untimed calls."""
        for _ in range(warmup):
            function(arrays)
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            function(arrays)
            seconds.append(time.perf_counter() - start)
        return seconds


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
    return [InProcessRunner(), *_defaults("runners")]
