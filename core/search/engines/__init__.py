"""Search engines over a schedule space (thesis §4.4.1), by registry name:

- ``"q"``: :class:`QMethodSearch`, simulated-annealing start points + Q-learning directions;
- ``"p"``: :class:`PMethodSearch`, simulated-annealing start points + every direction;
- ``"random"``: :class:`RandomSearch`.

All share ``engine.search(space, cost, budget_trials, seed, on_result=None,
budget_seconds=None) -> SearchResult``.

>>> sorted(ENGINES)
['p', 'q', 'random']
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
from tilecraft.search.engines.p_method import PMethodSearch
from tilecraft.search.engines.qnetwork import AdaDelta, QNetwork
from tilecraft.search.engines.random_search import RandomSearch
from tilecraft.search.errors import SearchError

#: engine classes by registry name
ENGINES: dict[str, type[SearchEngine]] = {
    QMethodSearch.name: QMethodSearch,
    PMethodSearch.name: PMethodSearch,
    RandomSearch.name: RandomSearch,
}


def get_engine(name: str, **options: Any) -> SearchEngine:
    """A new engine of the registry name ``name``, built with ``options``."""
    try:
        engine_class = ENGINES[name]
    except (KeyError, TypeError):
        raise SearchError(f"unknown search engine {name!r}; the engines are "
                          f"{', '.join(sorted(ENGINES))}") from None
    try:
        return engine_class(**options)
    except TypeError as err:
        raise SearchError(f"search engine {name!r}: {err}; see "
                          f"{engine_class.__name__}'s parameters") from None


__all__ = ["ENGINES", "AdaDelta", "CostFunction", "PMethodSearch", "QMethodSearch",
           "QNetwork", "RandomSearch", "ResultCallback", "SearchEngine", "SearchResult",
           "Trial", "TrialLog", "get_engine", "performance", "probability", "reward",
           "select_starts"]
