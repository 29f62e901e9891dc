"""Trees built from Chimera's solutions: the block abstraction of Eq. 3.1 as a dataflow tree.

Each :class:`~tilecraft.fusion.TileBlock` becomes a :class:`TileNode` in the block's level with
its loops temporal; a block with several children puts them under a ``Seq`` scope (Chimera
runs the producer's tile, then the consumer's, and its memory usage is the largest operator's,
Eq. 3.13's Seq case).

>>> from tilecraft.fusion import TileTree, gemm_chain
>>> chain = gemm_chain(64, 32, 48, 16)
>>> tree = from_tile_tree(TileTree.build(chain, [("L1", "mlkn", {"m": 16, "l": 8, "k": 8,
...                                                               "n": 32})]))
>>> print(tree)
dataflow of C -> E
L1 [L1]: Tp(m 64/16) Tp(l 16/8)
  Seq
    L1 [C]: Tp(k 48/8)
      op C
    L1 [E]: Tp(n 32/32)
      op E
"""

from __future__ import annotations

from tilecraft.dataflow.tree import DataflowTree, Loop, Node, OpNode, ScopeKind, ScopeNode, TileNode
from tilecraft.fusion.tiletree import TileBlock, TileTree


def from_tile_tree(tile_tree: TileTree, scope: ScopeKind = ScopeKind.SEQ) -> DataflowTree:
    """The dataflow tree of Chimera's tile tree (``scope`` binds sibling blocks)."""
    return DataflowTree(tile_tree.chain, _node(tile_tree.root, scope))


def _node(block: TileBlock, scope: ScopeKind) -> Node:
    loops = tuple(Loop(loop.name, loop.tile) for loop in block.loops)
    if block.op is not None:
        child: Node = OpNode(block.op)
    elif len(block.children) == 1:
        child = _node(block.children[0], scope)
    else:
        child = ScopeNode(scope, tuple(_node(c, scope) for c in block.children))
    return TileNode(block.level, loops, child, name=block.name)
