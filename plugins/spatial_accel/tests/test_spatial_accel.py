"""The Edge and Cloud specs of Table 3.7: discovered through the entry point, the table's
figures, and TileFlow's model running on them."""

from __future__ import annotations

import math

import pytest
from tilecraft_spatial_accel import make_cloud, make_edge

from tilecraft.dataflow import analyze_tree, from_tile_tree
from tilecraft.fusion import attention_chain, solve_chain


def test_registered_through_the_entry_point():
    from tilecraft.target.registry import discover_targets

    names = {info.name for info in discover_targets()}
    assert {"spatial_edge", "spatial_cloud"} <= names


def test_table_3_7_figures():
    edge, cloud = make_edge().spec, make_cloud().spec
    assert edge.compute.processing_elements == 32 * 32 and edge.compute.cores == 4
    assert edge.memory.level("L1").size_bytes == 4 * 2 ** 20
    clock = edge.compute.frequency_hz
    assert edge.memory.level("DRAM").bandwidth_bytes_per_cycle * clock == 60e9
    assert edge.memory.level("L1").bandwidth_bytes_per_cycle * clock == 1.2e12
    assert cloud.compute.cores * cloud.compute.processing_elements == 4 * 256 * 256
    assert cloud.memory.level("L2").size_bytes == 40 * 2 ** 20
    assert cloud.memory.level("L1").size_bytes * 16 == 20 * 2 ** 20
    assert cloud.memory.level("DRAM").bandwidth_bytes_per_cycle * clock == 384e9
    assert cloud.memory.instances("L1") == 64


@pytest.mark.parametrize("make", [make_edge, make_cloud])
def test_chimera_attention_tree_runs_on_both(make):
    spec = make().spec
    chain = attention_chain(8, 512, 64, "float16")
    inner = spec.memory.levels[-1]
    solution = solve_chain(chain, capacity_bytes=inner.size_bytes)
    tree = from_tile_tree(solution.tile_tree())
    renamed = tree.__class__(chain, _relevel(tree.root, inner.name))
    cost = analyze_tree(renamed, spec).check()
    assert cost.footprint_bytes[inner.name] <= inner.size_bytes
    # Q, K, V read and O written once at least: 4 x 8 x 512 x 64 x 2 bytes
    assert cost.traffic_bytes(inner.name) >= 4 * 8 * 512 * 64 * 2
    assert math.isfinite(cost.energy_pj) and cost.energy_pj > 0


def _relevel(node, level):
    from dataclasses import replace

    from tilecraft.dataflow import ScopeNode, TileNode
    if isinstance(node, TileNode):
        return replace(node, level=level, child=_relevel(node.child, level))
    if isinstance(node, ScopeNode):
        return replace(node, children=tuple(_relevel(c, level) for c in node.children))
    return node
