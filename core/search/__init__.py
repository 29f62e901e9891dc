"""FlexTensor's operator-level schedule search (thesis §4.3-4.4).

- :func:`analyze` — static analysis of an operator's small graph (§4.3.1);
- :func:`generate_space` — the pruned, re-organised schedule space of an operator on a target,
  built from typed sub-spaces with neighbour moves (§4.3.2); :func:`space_report` its sizes;
- engines (§4.4.1) that see only a :class:`Space` and a batch cost function: ``ENGINES`` by
  name (``"q"``, ``"p"``, ``"random"``), ``get_engine(name, **options)``.

>>> from tilecraft import te
>>> from tilecraft.search import analyze, get_engine
>>> A = te.placeholder((32, 24), name="A")
>>> B = te.compute((32, 24), lambda i, j: A[i, j] + 1.0, name="B")
>>> analyze(B).node("B").spatial_trip_counts
(32, 24)
>>> space = Space([("i", SplitSpace(32, 2)), ("j", SplitSpace(24, 2))])
>>> def cost(points):  # a synthetic cost, least at i = (4, 8), j = (2, 12)
...     return [abs(space.values(p)["i"][1] - 8) + abs(space.values(p)["j"][1] - 12) + 1.0
...             for p in points]
>>> result = get_engine("q").search(space, cost, budget_trials=30, seed=0)
>>> space.values(result.best_point), result.best_cost
({'i': (4, 8), 'j': (2, 12)}, 1.0)

``DEFAULT_SEARCH_ENGINES`` is what the core registers through the
``tilecraft_register_search_engines`` hook (:mod:`tilecraft.target.builtins`).
"""

from __future__ import annotations

from tilecraft.search.analysis import LoopInfo, NodeAnalysis, OperatorAnalysis, analyze
from tilecraft.search.engines import (
    ENGINES,
    GeneticSearch,
    MonteCarloTreeSearch,
    PMethodSearch,
    QMethodSearch,
    RandomSearch,
    SearchEngine,
    SearchResult,
    Trial,
    get_engine,
)
from tilecraft.search.errors import SearchError
from tilecraft.search.generate import (
    FIXED_DECISION_KEYS,
    ScheduleConfigDecoder,
    SplitLevels,
    band_template,
    generate_space,
)
from tilecraft.search.report import (
    SpaceReport,
    catalog_space_reports,
    format_reports,
    space_report,
)
from tilecraft.search.space import (
    ChoiceSpace,
    Direction,
    FuseSpace,
    InlineSpace,
    Point,
    ReorderSpace,
    Space,
    SplitSpace,
    SubSpace,
    UnrollSpace,
)

#: the core's search engines, registered through the plugin hook (one instance each)
DEFAULT_SEARCH_ENGINES: list[SearchEngine] = [QMethodSearch(), PMethodSearch(), RandomSearch(),
                                              GeneticSearch(), MonteCarloTreeSearch()]

__all__ = [
    "DEFAULT_SEARCH_ENGINES", "ENGINES", "FIXED_DECISION_KEYS", "ChoiceSpace", "Direction",
    "FuseSpace", "InlineSpace", "LoopInfo", "NodeAnalysis", "OperatorAnalysis",
    "PMethodSearch", "Point", "QMethodSearch", "RandomSearch", "ReorderSpace",
    "ScheduleConfigDecoder", "SearchEngine", "SearchError", "SearchResult", "Space",
    "SpaceReport", "SplitLevels", "SplitSpace", "SubSpace", "Trial", "UnrollSpace", "analyze",
    "band_template", "catalog_space_reports", "format_reports", "generate_space",
    "get_engine", "space_report",
]
