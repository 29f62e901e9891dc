"""Chimera (thesis ch. 3): fusion of compute-intensive operator chains.

- :mod:`.chain` / :mod:`.derive`: a chain's independent loops and affine tensor accesses,
  derived from te expressions (:func:`chain_from_computes`);
- :mod:`.dataflow`: Algorithm 1, data movement DV and memory usage MU of an order
  (:func:`analyze`);
- :mod:`.orders`: the ``I!`` orders, legality, distinct data-movement structures;
- :mod:`.solver`: tile sizes per order and memory level, Eq. 3.14-3.21 (:func:`solve_chain`),
  with :mod:`.parallel`'s spread of blocks over compute units (:class:`ParallelExecution`);
- :mod:`.tiletree`: the block abstraction of Eq. 3.1 (:class:`TileTree`);
- :mod:`.benefit` and :mod:`.planner`: Eq. 4.10 and the fusion plan of a graph
  (:func:`plan_fusion`).

>>> from tilecraft.fusion import gemm_chain, solve_chain
>>> solution = solve_chain(gemm_chain(512, 512, 512, 512), capacity_bytes=128 * 1024)
>>> print(solution.tile_tree().equation())
T_on_chip = {m, l}(T_C = {k}(C), T_E = {n}(E))
"""

from tilecraft.fusion.benefit import FusionBenefit, PeakFigures, fusion_benefit
from tilecraft.fusion.chain import (
    Chain,
    ChainLoop,
    ChainOp,
    FusionError,
    IndexExpr,
    TensorAccess,
    TensorRole,
)
from tilecraft.fusion.classify import is_compute_intensive
from tilecraft.fusion.constraints import LoopConstraint, merge_constraints, micro_kernel_constraints
from tilecraft.fusion.dataflow import DataMovement, analyze
from tilecraft.fusion.derive import chain_from_computes
from tilecraft.fusion.examples import attention_chain, conv_chain, gemm_chain
from tilecraft.fusion.orders import all_orders, dataflow_classes, is_legal, legal_orders
from tilecraft.fusion.parallel import ParallelExecution
from tilecraft.fusion.planner import (
    Action,
    FusionDecision,
    FusionGroup,
    FusionPlan,
    GroupKind,
    plan_fusion,
)
from tilecraft.fusion.solver import ChainSolution, LevelSolution, solve_chain, solve_order
from tilecraft.fusion.tiletree import TileBlock, TileLoop, TileTree

__all__ = [
    "Action", "Chain", "ChainLoop", "ChainOp", "ChainSolution", "DataMovement", "FusionBenefit",
    "FusionDecision", "FusionError", "FusionGroup", "FusionPlan", "GroupKind", "IndexExpr",
    "LevelSolution", "LoopConstraint", "ParallelExecution", "PeakFigures", "TensorAccess",
    "TensorRole", "TileBlock",
    "TileLoop", "TileTree", "all_orders", "analyze", "attention_chain", "chain_from_computes",
    "conv_chain", "dataflow_classes", "fusion_benefit", "gemm_chain", "is_compute_intensive",
    "is_legal", "legal_orders", "merge_constraints", "micro_kernel_constraints", "plan_fusion",
    "solve_chain", "solve_order",
]
