"""Search engines over a schedule space (thesis §4.4.1), by registry name:

- ``"q"``: :class:`QMethodSearch`, simulated-annealing start points + Q-learning directions;
- ``"p"``: :class:`PMethodSearch`, simulated-annealing start points + every direction;
- ``"random"``: :class:`RandomSearch`;
- ``"genetic"`` and ``"mcts"``: :class:`GeneticSearch` and :class:`MonteCarloTreeSearch`
  (TileFlow, §3.5.2).

All share ``engine.search(space, cost, budget_trials, seed, on_result=None,
budget_seconds=None) -> SearchResult``.

>>> sorted(ENGINES)
['genetic', 'mcts', 'p', 'q', 'random']
>>> get_engine("q", starts=2).starts
2
"""

from __future__ import annotations

from typing import Any

from tilecraft.search.engines.annealing import probability, select_starts
from tilecraft.search.engines.annealing_q import QMethodSearch, reward
from tilecraft.search.engines.base import (
    CostFunction,
    ResultCallback,
    SearchEngine,
    SearchResult,
    Trial,
    TrialLog,
    performance,
)
from tilecraft.search.engines.genetic import GeneticSearch
from tilecraft.search.engines.mcts import MonteCarloTreeSearch
from tilecraft.search.engines.p_method import PMethodSearch
from tilecraft.search.engines.qnetwork import AdaDelta, QNetwork
from tilecraft.search.engines.random_search import RandomSearch
from tilecraft.search.errors import SearchError

#: the core's engine classes by name (registered through the plugin hook as
#: ``tilecraft.search.DEFAULT_SEARCH_ENGINES``; :func:`get_engine` reads the hook's registry)
ENGINES: dict[str, type[SearchEngine]] = {
    QMethodSearch.name: QMethodSearch,
    PMethodSearch.name: PMethodSearch,
    RandomSearch.name: RandomSearch,
    GeneticSearch.name: GeneticSearch,
    MonteCarloTreeSearch.name: MonteCarloTreeSearch,
}


def get_engine(name: str, manager: Any = None, **options: Any) -> SearchEngine:
    """A new engine of the name ``name``, built with ``options``, from the one registry of
    search engines: the ``tilecraft_register_search_engines`` hook of ``manager`` (default:
    the process's plugin manager), where the core's engines register too. A registered
    :class:`SearchEngine` instance (or class) is built afresh with ``options``; another object
    with a ``search`` method is used as it is (it takes no options)."""
    from tilecraft.target.plugins import collect

    registered = collect("search_engines", manager)
    if not isinstance(name, str) or name not in registered:
        raise SearchError(f"unknown search engine {name!r}; the engines are "
                          f"{', '.join(sorted(registered))}")
    entry = registered[name]
    engine_class = entry if isinstance(entry, type) else type(entry)
    if isinstance(entry, type) or isinstance(entry, SearchEngine):
        try:
            return engine_class(**options)
        except TypeError as err:
            raise SearchError(f"search engine {name!r}: {err}; see "
                              f"{engine_class.__name__}'s parameters") from None
    if not callable(getattr(entry, "search", None)):
        raise SearchError(f"search engine {name!r} ({engine_class.__name__}) has no search("
                          "space, cost, budget_trials, seed, budget_seconds=None) method; "
                          "register a tilecraft.search.SearchEngine")
    if options:
        raise SearchError(f"search engine {name!r} is a registered instance and takes no "
                          f"options, got {', '.join(sorted(options))}")
    return entry


__all__ = ["ENGINES", "AdaDelta", "CostFunction", "GeneticSearch", "MonteCarloTreeSearch",
           "PMethodSearch", "QMethodSearch",
           "QNetwork", "RandomSearch", "ResultCallback", "SearchEngine", "SearchResult",
           "Trial", "TrialLog", "get_engine", "performance", "probability", "reward",
           "select_starts"]
