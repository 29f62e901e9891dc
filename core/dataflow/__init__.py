"""TileFlow (thesis §3.3-3.5): the tile-centric tree of a fused dataflow and its analysis.

- :mod:`.tree`: tile nodes (loops, spatial or temporal, in a memory level), scope nodes (Seq,
  Shar, Para, Pipe) and operator leaves (:class:`DataflowTree`);
- :mod:`.yaml_io`: trees to and from hand-written YAML;
- :mod:`.from_chimera`: the tree of a Chimera solution;
- :mod:`.movement`: data movement per tensor per level (Eq. 3.8-3.11);
- :mod:`.cost`: footprint, PEs, latency, energy on a target spec (Eq. 3.12, 3.13, 3.22);
- :mod:`.search`: genetic algorithm over order and binding, MCTS over tile sizes (§3.5.2);
- :mod:`.graph_plan`: fused or apart for topologies that are not chains (two computes sharing
  an input, a chain with a residual), the fusion stage's ``TileFlow:`` notes.
"""

from tilecraft.dataflow.cost import TreeCost, analyze_tree
from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.from_chimera import from_tile_tree
from tilecraft.dataflow.movement import MovementRecord, TreeMovement, analyze_movement
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
from tilecraft.dataflow.yaml_io import tree_from_yaml, tree_to_yaml

__all__ = ["DataflowError", "DataflowTree", "Loop", "LoopKind", "MovementRecord", "Node",
           "OpNode", "ScopeKind", "ScopeNode", "TileNode", "TreeCost", "TreeMovement",
           "analyze_movement", "analyze_tree", "from_tile_tree", "tree_from_yaml",
           "tree_to_yaml"]
