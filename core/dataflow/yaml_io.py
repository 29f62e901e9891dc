"""Dataflow trees to and from YAML a user can write by hand (TileFlow / Timeloop style).

A node is a mapping with exactly one of ``tile`` (a memory level; with ``loops`` and ``child``),
``scope`` (``Seq``, ``Shar``, ``Para`` or ``Pipe``; with ``children``) or ``op``; tile and scope
nodes may carry a ``name``. A loop is ``{var: m, step: 16, kind: Tp}`` (``kind`` defaults to
``Tp``).

>>> from tilecraft.fusion.examples import gemm_chain
>>> text = '''
... name: fused
... root:
...   tile: L1
...   loops: [{var: m, step: 16}, {var: l, step: 16}]
...   child:
...     scope: Shar
...     children:
...       - {tile: L1, loops: [{var: k, step: 8}], child: {op: C}}
...       - {tile: L1, loops: [{var: n, step: 32, kind: Sp}], child: {op: E}}
... '''
>>> tree = tree_from_yaml(text, gemm_chain(64, 32, 48, 16))
>>> tree_from_yaml(tree_to_yaml(tree), tree.workload) == tree
True
>>> try:
...     tree_from_yaml(text.replace("Shar", "Share"), tree.workload)
... except DataflowError as err:
...     print(err)
dataflow YAML: node root.child: field scope is 'Share', not a primitive (Seq, Shar, Para, Pipe)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.tree import (
    DataflowTree,
    Loop,
    LoopKind,
    Node,
    OpNode,
    ScopeKind,
    ScopeNode,
    TileNode,
)
from tilecraft.fusion.chain import Chain


def tree_to_yaml(tree: DataflowTree) -> str:
    """The YAML text of ``tree`` (:func:`tree_from_yaml` reads it back)."""
    document: dict[str, Any] = {"name": tree.name} if tree.name else {}
    document["root"] = _dump(tree.root)
    return yaml.safe_dump(document, sort_keys=False)


def tree_from_yaml(text: str, workload: Chain, levels: Sequence[str] | None = None,
                   source: str = "dataflow YAML") -> DataflowTree:
    """The tree in ``text`` over ``workload``; ``levels`` (a spec's memory levels) checks the
    level of every tile node."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DataflowError(f"{source}: not YAML ({err})") from None
    if not isinstance(document, Mapping) or "root" not in document:
        raise DataflowError(f"{source}: expected a mapping with a 'root' node (and an optional "
                            "'name')")
    extra = sorted(set(document) - {"root", "name"})
    if extra:
        raise DataflowError(f"{source}: unknown fields {', '.join(extra)} at the top; use root, "
                            "name")
    root = _load(document["root"], "root", source, tuple(levels) if levels else None)
    return DataflowTree(workload, root, str(document.get("name", "")))


def _dump(node: Node) -> dict[str, Any]:
    if isinstance(node, OpNode):
        return {"op": node.op}
    if isinstance(node, ScopeNode):
        out: dict[str, Any] = {"scope": node.kind.value}
        if node.name:
            out["name"] = node.name
        out["children"] = [_dump(child) for child in node.children]
        return out
    out = {"tile": node.level}
    if node.name:
        out["name"] = node.name
    out["loops"] = [{"var": lp.var, "step": lp.step, "kind": lp.kind.value} for lp in node.loops]
    out["child"] = _dump(node.child)
    return out


_FIELDS = {"tile": {"tile", "name", "loops", "child"}, "scope": {"scope", "name", "children"},
           "op": {"op"}}


def _load(data: Any, where: str, source: str, levels: tuple[str, ...] | None) -> Node:
    if not isinstance(data, Mapping):
        raise DataflowError(f"{source}: node {where} is {data!r}, not a mapping with one of "
                            "tile, scope, op")
    kinds = [key for key in _FIELDS if key in data]
    if len(kinds) != 1:
        raise DataflowError(f"{source}: node {where} needs exactly one of the fields tile, "
                            f"scope, op (got {', '.join(map(str, data)) or 'none'})")
    kind = kinds[0]
    extra = sorted(set(map(str, data)) - _FIELDS[kind])
    if extra:
        raise DataflowError(f"{source}: node {where}: unknown fields {', '.join(extra)} for a "
                            f"{kind} node; use {', '.join(sorted(_FIELDS[kind]))}")
    name = str(data.get("name", ""))
    if kind == "op":
        return OpNode(str(data["op"]))
    if kind == "scope":
        try:
            scope = ScopeKind(data["scope"])
        except ValueError:
            raise DataflowError(f"{source}: node {where}: field scope is {data['scope']!r}, not "
                                f"a primitive ({', '.join(k.value for k in ScopeKind)})") from None
        children = data.get("children")
        if not isinstance(children, list) or not children:
            raise DataflowError(f"{source}: node {where}: field children must be a non-empty "
                                "list of nodes")
        return ScopeNode(scope, tuple(_load(c, f"{where}.children[{i}]", source, levels)
                                      for i, c in enumerate(children)), name)
    level = str(data["tile"])
    if levels is not None and level not in levels:
        raise DataflowError(f"{source}: node {where}: field tile is level {level!r}, not a "
                            f"memory level of the target ({', '.join(levels)})")
    loops = data.get("loops", [])
    if not isinstance(loops, list):
        raise DataflowError(f"{source}: node {where}: field loops must be a list")
    if "child" not in data:
        raise DataflowError(f"{source}: node {where}: a tile node needs the field child")
    return TileNode(level, tuple(_loop(lp, f"{where}.loops[{i}]", source)
                                 for i, lp in enumerate(loops)),
                    _load(data["child"], f"{where}.child", source, levels), name)


def _loop(data: Any, where: str, source: str) -> Loop:
    if not isinstance(data, Mapping) or set(data) - {"var", "step", "kind"} \
            or not {"var", "step"} <= set(data):
        raise DataflowError(f"{source}: loop {where} must be {{var: NAME, step: INT, kind: Sp|Tp}}"
                            f", got {data!r}")
    try:
        kind = LoopKind(data.get("kind", "Tp"))
    except ValueError:
        raise DataflowError(f"{source}: loop {where}: field kind is {data['kind']!r}, not a "
                            "primitive (Sp, Tp)") from None
    step = data["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise DataflowError(f"{source}: loop {where}: field step is {step!r}; give an int >= 1")
    return Loop(str(data["var"]), step, kind)


__all__ = ["tree_from_yaml", "tree_to_yaml"]
