"""Cached cost tables: every point of a space measured once, replayed by any engine.

A search-efficiency study (thesis Fig. 4.9) is only fair when every engine meets the *same*
costs, and only trustworthy when it runs over many seeds. Measuring every point of a space once
and storing the table lets each engine be replayed against those costs cheaply and
deterministically: :meth:`CostTable.cost_function` is a batch cost function for
:meth:`~tilecraft.search.engines.base.SearchEngine.search` that looks costs up.

A table is a JSON file (format ``tilecraft-cost-table``, version 1): the space's signature
(its sub-spaces and their choices, so a table of a changed space is refused), the machine
fingerprint it was measured on (a table from another machine is refused unless asked for),
how it was measured, and one cost per point (``null`` for a failed candidate). Spaces too
large to measure exhaustively are cut down first with :func:`slice_space`.

>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([("x", ChoiceSpace(range(4))), ("y", ChoiceSpace(range(3)))], name="toy")
>>> table = CostTable.from_function("toy", space, lambda p: 1.0 + abs(p[0] - 2) + p[1])
>>> table.optimum, table.best_point, len(table)
(1.0, (2, 0), 12)
>>> table.cost_function()([(0, 0), (2, 1)])
[3.0, 2.0]
>>> table.fraction_of_optimum(2.0)
0.5
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["FORMAT", "VERSION", "CostTable", "CostTableError", "machine_fingerprint",
           "space_signature"]

FORMAT = "tilecraft-cost-table"
VERSION = 1


class CostTableError(SearchError):
    """A cost table file is missing, corrupt, from a newer format, of another space or from
    another machine: the message names the file and what to do (usually: rebuild it)."""


def machine_fingerprint() -> dict[str, Any]:
    """What identifies the machine a table was measured on: CPU model, a hash of its ISA
    flags, logical CPUs and architecture (``key`` hashes them all).

    >>> fingerprint = machine_fingerprint()
    >>> sorted(fingerprint), len(fingerprint["key"])
    (['arch', 'cpu_flags', 'cpu_model', 'cpus', 'key'], 16)
    """
    model, flags = "unknown", ""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = " ".join(sorted(value.split()))
    if model == "unknown":
        model = platform.processor() or "unknown"
    found = {"cpu_model": model, "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
             "cpus": os.cpu_count() or 1, "arch": platform.machine()}
    found["key"] = hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()[:16]
    return found


def space_signature(space: Space) -> str:
    """A hash of the space's sub-spaces, their choices and their moves (not of the points'
    costs): two spaces with the same signature have the same points and neighbours.

    >>> from tilecraft.search.space import ChoiceSpace, Space
    >>> a = Space([("x", ChoiceSpace(range(4)))])
    >>> space_signature(a) == space_signature(Space([("x", ChoiceSpace(range(4)))]))
    True
    >>> space_signature(a) == space_signature(Space([("x", ChoiceSpace(range(5)))]))
    False
    """
    parts = []
    for name, subspace in space.subspaces.items():
        values = [repr(subspace.value(i)) for i in range(subspace.size)]
        parts.append(f"{name}|{type(subspace).__name__}|{values}|{list(subspace.moves)!r}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _encode_cost(cost: float) -> float | None:
    return None if math.isinf(cost) else cost


class CostTable:
    """Costs (seconds; ``math.inf`` = failed) of points of one space, with where they came from.

    ``points`` need not cover the space, but an engine may only be replayed on a table that
    does (:meth:`cost_function` raises on a point the table lacks).
    """

    def __init__(self, name: str, space: Space, costs: Mapping[Point, float],
                 machine: Mapping[str, Any] | None = None,
                 meta: Mapping[str, Any] | None = None):
        if not costs:
            raise CostTableError(f"cost table {name!r}: no costs; measure at least one point")
        self.name = name
        self.space = space
        self.costs: dict[Point, float] = {}
        for point, cost in costs.items():
            value = float(cost)
            if math.isnan(value) or value < 0:
                raise CostTableError(f"cost table {name!r}: point {point} has cost {cost!r}; "
                                     "costs are seconds >= 0, or math.inf for a failure")
            self.costs[space.check(point)] = value
        self.machine = dict(machine) if machine is not None else machine_fingerprint()
        self.meta = dict(meta or {})
        self.best_point = min(self.costs, key=lambda p: (self.costs[p], p))
        self.optimum = self.costs[self.best_point]

    @classmethod
    def from_function(cls, name: str, space: Space, cost: Callable[[Point], float],
                      points: Iterable[Point] | None = None, **kwargs: Any) -> CostTable:
        """A table of ``cost(point)`` for ``points`` (every point of ``space`` by default)."""
        chosen = space.points() if points is None else points
        return cls(name, space, {tuple(p): cost(tuple(p)) for p in chosen}, **kwargs)

    def __len__(self) -> int:
        return len(self.costs)

    @property
    def complete(self) -> bool:
        return len(self.costs) == self.space.size

    @property
    def failures(self) -> int:
        return sum(math.isinf(c) for c in self.costs.values())

    def cost_function(self) -> Callable[[list[Point]], list[float]]:
        """A batch cost function that looks the points' costs up (no measurement)."""
        costs, name = self.costs, self.name

        def cost(points: list[Point]) -> list[float]:
            try:
                return [costs[tuple(p)] for p in points]
            except KeyError as err:
                raise CostTableError(f"cost table {name!r} has no cost for point {err.args[0]};"
                                     " replay engines only on a table covering the space"
                                     ) from None
        return cost

    def fraction_of_optimum(self, cost: float) -> float:
        """Performance relative to the best point: ``optimum / cost`` (0 for a failure)."""
        return 0.0 if math.isinf(cost) else self.optimum / max(cost, 1e-300)

    def threshold(self, fraction: float) -> float:
        """The largest cost that reaches ``fraction`` of the optimum's performance."""
        if not 0 < fraction <= 1:
            raise CostTableError(f"cost table {self.name!r}: fraction={fraction}; use 0 < f <= 1")
        return self.optimum / fraction

    def rank(self, cost: float) -> int:
        """How many points of the table are strictly better than ``cost`` (0 = optimal)."""
        return sum(c < cost for c in self.costs.values())

    # files -----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        points = sorted(self.costs)
        return {"format": FORMAT, "version": VERSION, "name": self.name,
                "space": {"name": self.space.name, "signature": space_signature(self.space),
                          "sizes": self.space.sizes, "size": self.space.size},
                "machine": self.machine, "meta": self.meta,
                "points": [list(p) for p in points],
                "costs": [_encode_cost(self.costs[p]) for p in points]}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the table to ``path`` atomically (a temporary file, then a rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(path.name + f".tmp{os.getpid()}")
        scratch.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")
        os.replace(scratch, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], space: Space,
             any_machine: bool = False) -> CostTable:
        """The table at ``path`` for ``space``; refuses (:class:`CostTableError`) a missing or
        corrupt file, a newer format, a table of another space, and — unless ``any_machine``
        — one measured on another machine."""
        path = Path(path)
        rebuild = "rebuild it with `python bench/bench_search.py --build-tables`"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise CostTableError(f"cost table {path} does not exist; {rebuild}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CostTableError(f"cost table {path} is not readable JSON ({err}); delete and "
                                 f"{rebuild}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CostTableError(f"{path} is not a {FORMAT} file (its 'format' field is "
                                 f"{data.get('format') if isinstance(data, dict) else None!r})")
        version = data.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise CostTableError(f"cost table {path} has format version {version!r}; this "
                                 f"tilecraft reads version <= {VERSION}: upgrade, or {rebuild}")
        try:
            name, recorded, machine = data["name"], data["space"]["signature"], data["machine"]
            points, costs, meta = data["points"], data["costs"], data.get("meta", {})
            if len(points) != len(costs):
                raise ValueError(f"{len(points)} points but {len(costs)} costs")
            table = {tuple(int(i) for i in p): (math.inf if c is None else float(c))
                     for p, c in zip(points, costs)}
        except (KeyError, TypeError, ValueError) as err:
            raise CostTableError(f"cost table {path} is corrupt ({type(err).__name__}: {err}); "
                                 f"delete and {rebuild}") from None
        signature = space_signature(space)
        if recorded != signature:
            raise CostTableError(f"cost table {path} was measured on another space (signature "
                                 f"{recorded}, space {space.name!r} has {signature}): the space "
                                 f"changed since; {rebuild}")
        here = machine_fingerprint()
        if not any_machine and machine.get("key") != here["key"]:
            raise CostTableError(f"cost table {path} was measured on another machine "
                                 f"({machine.get('cpu_model')!r}, {machine.get('cpus')} CPUs, "
                                 f"key {machine.get('key')}; this one is {here['cpu_model']!r}, "
                                 f"{here['cpus']} CPUs, key {here['key']}); {rebuild}, or pass "
                                 "any_machine=True to replay foreign costs knowingly")
        try:
            return cls(name, space, table, machine=machine, meta=meta)
        except SearchError as err:
            raise CostTableError(f"cost table {path} is corrupt: {err}; delete and "
                                 f"{rebuild}") from None
