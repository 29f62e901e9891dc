"""The hooks of tilecraft's optional extensions (pluggy, project name ``tilecraft``).

Targets are not hooks: they come through the entry point group ``tilecraft.targets`` (see
:mod:`tilecraft.target.registry`). Hooks are for extras a package may add to the core:
graph passes, cost models, search engines, operators and runners. A package declares an entry
point in the group ``tilecraft.plugins`` whose object (a module or an instance) implements some
of these hooks; :func:`tilecraft.target.plugins.get_plugin_manager` loads them when asked,
never on import. The core's own defaults register through the same hooks
(:mod:`tilecraft.target.builtins`).

Every hook takes no arguments and returns a list of named objects: an object's name is its
``name`` attribute, or ``__name__`` for a plain function. Names must be unique per kind.
The module that consumes a kind defines what it calls on the objects; each hook below says
what that is.

>>> hook_names()
['tilecraft_register_cost_models', 'tilecraft_register_operators', 'tilecraft_register_passes', \
'tilecraft_register_runners', 'tilecraft_register_search_engines']
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import pluggy

PROJECT = "tilecraft"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@runtime_checkable
class NamedExtension(Protocol):
    """Anything with a ``name``."""

    @property
    def name(self) -> str: ...


#: what a registration hook returns items of: a named object or a plain function
Extension = NamedExtension | Callable[..., Any]


@hookspec
def tilecraft_register_passes() -> list[Extension]:
    """Graph passes: each is called ``graph_pass(graph) -> Graph`` and must return an
    equivalent graph (simplification, constant folding, layout changes); the first stage of
    ``tilecraft.compile`` runs them in order (:mod:`tilecraft.pipeline.graph_passes`).

    >>> from tilecraft.target.plugins import collect, make_plugin_manager
    >>> class KeepGraph:
    ...     name = "keep_graph"
    ...     def __call__(self, graph):
    ...         return graph
    >>> class MyPlugin:
    ...     @hookimpl
    ...     def tilecraft_register_passes(self):
    ...         return [KeepGraph()]
    >>> manager = make_plugin_manager([MyPlugin()], entry_points=False, builtins=False)
    >>> list(collect("passes", manager))
    ['keep_graph']
    """


@hookspec
def tilecraft_register_cost_models() -> list[Extension]:
    """Cost models: each predicts the cost of a candidate (a schedule of a kernel on a
    target) so a search can rank candidates without measuring all of them. The AMOS mapping
    stage of ``tilecraft.compile`` ranks mappings with the one named ``cost_model`` (default
    ``"amos"``): ``rank(compute, intrinsic, spec, mappings, *, thorough)`` (see
    :mod:`tilecraft.cost`).

    >>> from tilecraft.target.plugins import collect, make_plugin_manager
    >>> class RooflineModel:
    ...     name = "roofline"
    ...     def rank(self, compute, intrinsic, spec, mappings, *, thorough=True):
    ...         return []
    >>> class MyPlugin:
    ...     @hookimpl
    ...     def tilecraft_register_cost_models(self):
    ...         return [RooflineModel()]
    >>> manager = make_plugin_manager([MyPlugin()], entry_points=False, builtins=False)
    >>> list(collect("cost_models", manager))
    ['roofline']
    """


@hookspec
def tilecraft_register_search_engines() -> list[Extension]:
    """Search engines: each explores a search space given only the space and a cost
    function, with an explicit seed (simulated annealing, genetic, MCTS, random ...). The
    tuner runs the one its options name (``TuningOptions.engine``), looked up here by
    :func:`tilecraft.search.get_engine`: a :class:`tilecraft.search.SearchEngine` (built afresh
    with the options) or any object with ``search(space, cost, budget_trials, seed,
    budget_seconds=None) -> SearchResult``.

    >>> from tilecraft.search import RandomSearch, get_engine
    >>> from tilecraft.target.plugins import make_plugin_manager
    >>> class Exhaustive(RandomSearch):
    ...     name = "exhaustive"
    >>> class MyPlugin:
    ...     @hookimpl
    ...     def tilecraft_register_search_engines(self):
    ...         return [Exhaustive()]
    >>> manager = make_plugin_manager([MyPlugin()], entry_points=False)
    >>> type(get_engine("exhaustive", manager=manager, batch_size=4)).__name__
    'Exhaustive'
    """


@hookspec
def tilecraft_register_operators() -> list[Extension]:
    """Operators: functions building te tensors (``gemm(A, B) -> Tensor``), found by name:
    ``tilecraft compile`` gives the program file them as ``operators`` (an ONNX importer
    would look them up the same way).

    >>> from tilecraft import te
    >>> from tilecraft.target.plugins import collect, make_plugin_manager
    >>> def double(x):
    ...     return te.compute(x.shape, lambda i: x[i] * 2.0, name="double")
    >>> class MyPlugin:
    ...     @hookimpl
    ...     def tilecraft_register_operators(self):
    ...         return [double]
    >>> manager = make_plugin_manager([MyPlugin()], entry_points=False, builtins=False)
    >>> op = collect("operators", manager)["double"]
    >>> print(op(te.placeholder((4,), name="x")).statement())
    double[i] = x[i] * 2.0
    """


@hookspec
def tilecraft_register_runners() -> list[Extension]:
    """Runners: each runs a loaded kernel on arrays and times it (``runner.run(function,
    arrays, *, repeat, warmup, number=1) -> seconds per call of each measurement``); the
    tuner's measurement uses the one ``MeasureSettings.runner`` names (default
    ``in_process``, see :mod:`tilecraft.runtime.runners`).

    >>> from tilecraft.target.plugins import collect, make_plugin_manager
    >>> class SerialRunner:
    ...     name = "serial"
    ...     def run(self, function, arrays, *, repeat=3, warmup=1, number=1):
    ...         return [0.0] * repeat
    >>> class MyPlugin:
    ...     @hookimpl
    ...     def tilecraft_register_runners(self):
    ...         return [SerialRunner()]
    >>> manager = make_plugin_manager([MyPlugin()], entry_points=False)
    >>> sorted(collect("runners", manager))
    ['in_process', 'serial']
    """


def hook_names() -> list[str]:
    """The names of every hook specified here."""
    module = sys.modules[__name__]
    return sorted(name for name in vars(module) if name.startswith(f"{PROJECT}_"))
