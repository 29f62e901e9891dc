"""TileFlow's tree: construction checks, printing, YAML round trips and bad YAML."""

from __future__ import annotations

import pytest

from tilecraft.dataflow import (
    DataflowError,
    DataflowTree,
    Loop,
    LoopKind,
    OpNode,
    ScopeKind,
    ScopeNode,
    TileNode,
    from_tile_tree,
    tree_from_yaml,
    tree_to_yaml,
)
from tilecraft.fusion import TileTree, conv_chain, gemm_chain

CHAIN = gemm_chain(64, 32, 48, 16)

FUSED = """
name: fused
root:
  tile: L2
  loops: [{var: m, step: 32, kind: Sp}]
  child:
    tile: L1
    name: outer
    loops: [{var: m, step: 8}, {var: l, step: 16}]
    child:
      scope: Pipe
      children:
        - {tile: L1, name: c, loops: [{var: k, step: 8}], child: {op: C}}
        - {tile: L1, name: e, loops: [{var: n, step: 4, kind: Sp}], child: {op: E}}
"""


def test_yaml_round_trip_and_printing():
    tree = tree_from_yaml(FUSED, CHAIN, levels=("DRAM", "L2", "L1"))
    assert tree_from_yaml(tree_to_yaml(tree), CHAIN) == tree
    text = str(tree)
    assert "Sp(m 64/32)" in text and "Tp(m 32/8)" in text and "Pipe" in text
    assert [lp.extent for lp in tree.path_loops("E")] == [64, 32, 16, 32]
    assert tree.levels() == ("L2", "L1")


@pytest.mark.parametrize("chain,levels", [
    (gemm_chain(37, 13, 29, 11), [("L1", "nmlk", {"m": 5, "n": 13, "l": 4, "k": 7})]),
    (conv_chain(1, 8, 9, 7), [("L1", None, {"h": 3, "w": 7, "k": 4, "rc": 8})]),
])
def test_chimera_trees_round_trip(chain, levels):
    from tilecraft.fusion import dataflow_classes
    if levels[0][1] is None:
        levels = [(levels[0][0], dataflow_classes(chain)[0].order, levels[0][2])]
    tree = from_tile_tree(TileTree.build(chain, levels))
    assert tree_from_yaml(tree_to_yaml(tree), chain) == tree
    assert set(tree.ops()) == {op.name for op in chain.ops}


@pytest.mark.parametrize("edit,message", [
    (("Pipe", "Pipeline"), r"node root.child.child: field scope is 'Pipeline', not a primitive"),
    (("kind: Sp}]\n  child", "kind: Spatial}]\n  child"),
     r"loop root.loops\[0\]: field kind is 'Spatial', not a primitive"),
    (("tile: L2", "tile: L3"), r"node root: field tile is level 'L3', not a memory level"),
    (("{op: C}", "{op: C, level: L1}"), r"node root.child.child.children\[0\].child: unknown "
                                       "fields level"),
    (("step: 8}, {var: l", "step: 0}, {var: l"), r"field step is 0"),
    (("{op: E}", "{op: X}"), r"operator 'E' appears 0 times"),
])
def test_bad_yaml_names_node_and_field(edit, message):
    with pytest.raises(DataflowError, match=message):
        tree_from_yaml(FUSED.replace(*edit), CHAIN, levels=("DRAM", "L2", "L1"))


def test_scope_claiming_loops_its_children_do_not_share():
    leaf_c = TileNode("L1", (), OpNode("C"))
    leaf_e = TileNode("L1", (Loop("n", 4),), OpNode("E"))
    with pytest.raises(DataflowError, match=r"tile node top claims loop k \(field loops\), a "
                                            "reduction private to producer C"):
        DataflowTree(CHAIN, TileNode("L1", (Loop("m", 8), Loop("k", 8)),
                                     ScopeNode(ScopeKind.SEQ, (leaf_c, leaf_e)), name="top"))
    with pytest.raises(DataflowError, match=r"tile node solo claims loop n \(field loops\) but "
                                            "none of its operators \\(C\\) uses it"):
        DataflowTree(CHAIN, ScopeNode(ScopeKind.SEQ, (
            TileNode("L1", (Loop("n", 8),), OpNode("C"), name="solo"), leaf_e)))
    # a reduction loop that runs once (step = extent) hands over no partial sums
    DataflowTree(CHAIN, TileNode("L1", (Loop("k", 48),), ScopeNode(ScopeKind.SEQ,
                                                                   (leaf_c, leaf_e))))


def test_unknown_variable_and_spatial_kind_kept():
    with pytest.raises(DataflowError, match=r"loops over 'z' \(field loops\)"):
        DataflowTree(CHAIN, TileNode("L1", (Loop("z", 2),), ScopeNode(
            ScopeKind.SEQ, (OpNode("C"), OpNode("E")))))
    tree = DataflowTree(CHAIN, TileNode("L1", (Loop("m", 1, LoopKind.SPATIAL),), ScopeNode(
        ScopeKind.PARA, (OpNode("C"), OpNode("E")))))
    assert tree.path_loops("C")[0].trips == 64
