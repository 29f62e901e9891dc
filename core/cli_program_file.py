"""The program file ``tilecraft compile``, ``tune`` and ``report`` read: a Python file that
defines ``graph`` (a Graph, a Tensor or a list of Tensors) or a function ``build()`` returning
one; ``--graph NAME`` picks another variable or zero-argument function. The file runs with
``operators`` in its namespace: every operator registered through the
``tilecraft_register_operators`` hook, by name (the core's ``tilecraft.ops`` and the
plugins'), e.g. ``operators["matmul"](A, B)``.

>>> load_program(Path("no_such_prog.py"), None)
Traceback (most recent call last):
...
tilecraft.errors.TilecraftError: no_such_prog.py: no such file; pass the Python file that \
builds the graph
"""

from __future__ import annotations

import runpy
from pathlib import Path

from tilecraft.api import as_graph
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph


def load_program(path: Path, name: str | None) -> Graph:
    """Run the file at ``path`` and return the graph of its variable or function ``name``
    (None: ``graph``, then ``build``); a TilecraftError naming the file and what to define
    when it has neither."""
    if not path.is_file():
        raise TilecraftError(f"{path}: no such file; pass the Python file that builds the graph")
    from tilecraft.target.plugins import collect

    # the operators registered through the hook (the core's and the plugins'), by name
    namespace = runpy.run_path(str(path), init_globals={"operators": collect("operators")},
                               run_name="__tilecraft_compile__")
    candidates = [name] if name else ["graph", "build"]
    for candidate in candidates:
        if candidate in namespace:
            value = namespace[candidate]
            made = value() if callable(value) and not hasattr(value, "computes") else value
            return as_graph(made)
    raise TilecraftError(f"{path} defines none of {', '.join(candidates)}; define `graph = "
                         "tc.Graph.from_outputs([...])` or pass --graph NAME")


__all__ = ["load_program"]
