"""Chimera's chain description and Algorithm 1 (thesis §3.4.1.1, Table 3.4, §3.1.4.1).

The reference for the data-movement numbers is (a) the thesis's own formulas, (b) a literal
transcription of Algorithm 1 below, and (c) a brute-force walk over every tile of the fused
loop nest that reloads a tensor's tile whenever its bounding box changes.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.fusion import (
    FusionError,
    TensorRole,
    all_orders,
    analyze,
    attention_chain,
    chain_from_computes,
    conv_chain,
    gemm_chain,
)
from tilecraft.fusion.chain import IndexExpr
from tilecraft.fusion.examples import gemm_chain_tensors
from tilecraft.fusion.polynomial import Extent, Polynomial, Tile, Trips
from tilecraft.graph import Graph

M, N, K, L = 512, 256, 384, 128


def sym(kind, loop: str) -> Polynomial:
    return Polynomial.symbol(kind(loop))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# -- Table 3.4 and Eq. 3.15 / 3.16 ----------------------------------------------------------------

def test_table_3_4_symbolically():
    movement = analyze(gemm_chain(M, N, K, L), "mlkn")
    table = {  # tensor: (DM, DF) as printed in Table 3.4
        "A": ("M*K*ceil(L/T_L)", "T_M*T_K"),
        "B": ("K*L*ceil(M/T_M)", "T_K*T_L"),
        "C": ("0", "T_M*T_L"),
        "D": ("L*N*ceil(M/T_M)", "T_L*T_N"),
        "E": ("M*N*ceil(L/T_L)", "T_M*T_N"),
    }
    for tensor, (dm, df) in table.items():
        assert str(movement.movement(tensor)) == dm
        assert str(movement.footprint(tensor)) == df
    m, n, k, l = (sym(Extent, x) for x in "mnkl")
    eq_3_15 = (m * k * sym(Trips, "l") + k * l * sym(Trips, "m") + n * l * sym(Trips, "m")
               + m * n * sym(Trips, "l"))
    assert movement.volume() == eq_3_15
    tm, tn, tk, tl = (sym(Tile, x) for x in "mnkl")
    assert movement.usage(0) == tm * tk + tk * tl + tm * tl  # GEMM1_MU of Eq. 3.16
    assert movement.usage(1) == tm * tl + tl * tn + tm * tn  # GEMM2_MU


@pytest.mark.parametrize("tiles", [
    {"m": 64, "n": 32, "k": 32, "l": 64},
    {"m": 7, "n": 13, "k": 5, "l": 11},        # nothing divides
    {"m": 1, "n": 1, "k": 1, "l": 1},
    {"m": M, "n": N, "k": K, "l": L},           # one tile each
])
def test_table_3_4_numerically(tiles):
    values = analyze(gemm_chain(M, N, K, L), "mlkn").evaluate(tiles)
    tm, tn, tk, tl = (tiles[x] for x in "mnkl")
    expected = {"A": M * K * ceil_div(L, tl), "B": K * L * ceil_div(M, tm), "C": 0,
                "D": N * L * ceil_div(M, tm), "E": M * N * ceil_div(L, tl)}
    assert dict(values.per_tensor) == expected
    assert values.volume == sum(expected.values())
    assert values.volume_bytes == 4 * values.volume
    assert values.usage == max(tm * tk + tk * tl + tm * tl, tm * tl + tl * tn + tm * tn)


# -- a literal transcription of Algorithm 1 -----------------------------------------------------

def algorithm_1(chain, order, tiles, once_indexes=False):
    """Algorithm 1 as printed: DF * prod ceil(L/s) over loops after the first indexing one.
    (Additions: an elementwise step computed in place into its input's buffer, like
    softmax's exp, adds no footprint of its own; a loop that runs once indexes nothing — Eq.
    3.9's set difference — unless ``once_indexes``.)"""
    dv, mu = 0, 0
    perm = list(order)
    extents = chain.extents
    for index, op in enumerate(chain.ops):
        total_df = 0
        for access in op.accesses:
            df = 1
            for dim in access.indices:
                df *= sum(abs(c) * (tiles[lp] - 1) for lp, c in dim.terms) + 1
            total_df += df if access.on_chip else 0
            if access.io:
                dm, keep_reuse = df, True
                for loop in reversed(perm):
                    runs = ceil_div(extents[loop], tiles[loop]) > 1 or once_indexes
                    if loop in access.loops and runs:
                        keep_reuse = False
                    if not keep_reuse:
                        dm *= ceil_div(extents[loop], tiles[loop])
                dv += dm
        perm = [lp for lp in perm if lp not in chain.private_loops(index)]
        mu = max(mu, total_df)
    return dv, mu


@pytest.mark.parametrize("chain", [gemm_chain(48, 24, 36, 60),
                                   attention_chain(batch=2, seq=24, head_dim=12)],
                         ids=["gemm", "attention"])
def test_matches_algorithm_1_for_every_order_when_tiles_divide(chain):
    rng = random.Random(7)
    for order in all_orders(chain):
        tiles = {lp.name: lp.extent if lp.full_extent else
                 rng.choice([d for d in range(1, lp.extent + 1) if lp.extent % d == 0])
                 for lp in chain.loops}
        values = analyze(chain, order).evaluate(tiles)
        dv, mu = algorithm_1(chain, order, tiles)
        assert values.volume == dv, order
        assert values.usage == mu, order


# -- brute force: walk every tile of the fused nest ----------------------------------------------

def simulated_movement(chain, order, tiles):
    """Elements loaded, per tensor: each operator runs the loops still in the order (its
    predecessors' private loops are gone); a tile is (re)loaded whenever its box changes."""
    extents = chain.extents
    perm = list(order)
    moved: dict[str, int] = {}
    for index, op in enumerate(chain.ops):
        ranges = [range(ceil_div(extents[lp], tiles[lp])) for lp in perm]
        last: dict[int, tuple] = {}
        for point in itertools.product(*ranges):
            start = {lp: i * tiles[lp] for lp, i in zip(perm, point)}
            size = {lp: min(tiles[lp], extents[lp] - start[lp]) for lp in perm}
            for number, access in enumerate(op.accesses):
                if not access.io:
                    continue
                box = tuple(_interval(dim, start, size) for dim in access.indices)
                if last.get(number) != box:
                    last[number] = box
                    moved[access.tensor] = moved.get(access.tensor, 0) + math.prod(
                        hi - lo + 1 for lo, hi in box)
        perm = [lp for lp in perm if lp not in chain.private_loops(index)]
    return moved


def _interval(dim: IndexExpr, start: dict, size: dict) -> tuple[int, int]:
    lo = hi = dim.constant
    for loop, coef in dim.terms:
        a, b = coef * start[loop], coef * (start[loop] + size[loop] - 1)
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


@pytest.mark.parametrize("order", ["mlkn", "mnlk", "lnmk", "nkml", "kmnl"])
def test_exact_boundary_counting_matches_a_tile_walk(order):
    chain = gemm_chain(10, 9, 7, 11)  # tiles below leave partial tiles at every boundary
    tiles = {"m": 4, "n": 5, "k": 3, "l": 4}
    values = analyze(chain, order).evaluate(tiles)
    simulated = simulated_movement(chain, order, tiles)
    assert {t: v for t, v in values.per_tensor.items() if v} == simulated


@pytest.mark.parametrize("order", ["mlkn", "lkmn", "nmlk", "knml"])
def test_a_loop_that_runs_once_indexes_nothing(order):
    # m of extent 1, n and k each one tile: Eq. 3.9's set difference is empty at their steps
    chain = gemm_chain(1, 9, 7, 12)
    tiles = {"m": 1, "n": 9, "k": 7, "l": 4}
    movement = analyze(chain, order)
    values = movement.evaluate(tiles)
    assert {t: v for t, v in values.per_tensor.items() if v} == \
        simulated_movement(chain, order, tiles)
    assert values.volume == algorithm_1(chain, order, tiles)[0]
    # on a grid of tiles (the solver's rounding) each point as on its own
    grid = {"m": np.array([1, 1, 1]), "n": np.array([9, 2, 9]), "k": np.array([7, 7, 3]),
            "l": np.array([4, 12, 5])}
    columns = movement.evaluate(grid).per_tensor
    for i in range(3):
        point = {lp: int(v[i]) for lp, v in grid.items()}
        assert {t: int(np.broadcast_to(v, 3)[i]) for t, v in columns.items()} == \
            movement.evaluate(point).per_tensor


def test_algorithm_1_as_printed_reloads_around_a_loop_that_runs_once():
    # order l k m n: A's indexing loops k and m run once, E's m and n too; printed, the
    # three tiles of l reload both
    chain = gemm_chain(1, 9, 7, 12)
    tiles = {"m": 1, "n": 9, "k": 7, "l": 4}
    values = analyze(chain, "lkmn").evaluate(tiles)
    printed, _ = algorithm_1(chain, "lkmn", tiles, once_indexes=True)
    assert values.per_tensor["A"] == 7
    assert values.per_tensor["E"] == 9
    assert printed - values.volume == (7 + 9) * (3 - 1)


def test_halo_movement_of_a_conv_chain_matches_a_tile_walk():
    chain = conv_chain(batch=2, channels=3, height=9, width=8, mid_channels=4, out_channels=3,
                       kernel=3, padding=0)
    assert chain.extents["h"] == 5 and chain.extents["w"] == 4
    tiles = {"n": 1, "k": 2, "h": 3, "w": 3, "rc": 3, "rh": 2, "rw": 2, "rc1": 2, "rh1": 2,
             "rw1": 2}
    rng = random.Random(3)
    orders = [tuple(rng.sample(chain.loop_names, len(chain.loop_names))) for _ in range(4)]
    for order in orders:
        values = analyze(chain, order).evaluate(tiles)
        assert {t: v for t, v in values.per_tensor.items() if v} == \
            simulated_movement(chain, order, tiles), order


def test_conv_chain_tiles_carry_the_halo():
    chain = conv_chain(kernel=3, padding=1)
    movement = analyze(chain, chain.loop_names)
    n, rc, h, w, rh, rw, rh1, rw1, rc1 = (sym(Tile, x) for x in
                                          ["n", "rc", "h", "w", "rh", "rw", "rh1", "rw1", "rc1"])
    # the consumer's input tile: T_h + T_rh - 1 rows (the window of the second convolution)
    assert movement.footprint("conv2_pad") == n * rc * (h + rh - 1) * (w + rw - 1)
    # the producer computes that many rows; its own input adds its window: two halos
    assert movement.footprint("conv1_pad") == n * rc1 * (h + rh + rh1 - 2) * (w + rw + rw1 - 2)
    entry = next(e for e in movement.entries if e.tensor == "conv1_pad")
    assert entry.footprint_text == "T_N*T_RC1*(T_H + T_RH + T_RH1 - 2)*(T_W + T_RW + T_RW1 - 2)"
    # one tile over everything: the exact count is the padded input plus the halo overlap
    whole = {lp.name: lp.extent for lp in chain.loops}
    assert movement.evaluate(whole).per_tensor["conv1_pad"] == 16 * (14 + 4) * (14 + 4)


def test_strided_window_footprint_is_the_bounding_box():
    x = te.placeholder((1, 4, 17, 17), name="x")
    w1 = te.placeholder((4, 4, 3, 3), name="w1")
    w2 = te.placeholder((4, 4, 3, 3), name="w2")
    first = ops.conv2d(x, w1, name="c1")
    second = ops.conv2d(first, w2, stride=2, name="c2")
    chain = chain_from_computes([first, second])
    c1 = chain.ops[0].output
    assert str(c1.indices[2]) == "2*h + rh"
    assert str(c1.footprint()) == str(sym(Tile, "n") * sym(Tile, "rc")
                                      * (2 * sym(Tile, "h") + sym(Tile, "rh") - 2)
                                      * (2 * sym(Tile, "w") + sym(Tile, "rw") - 2))


# -- the three insights of §3.1.4.1 ------------------------------------------------------------

def test_insight_1_loops_not_indexing_a_tensor_inside_its_reload_move_nothing():
    # in m k n l, n and l run inside k (the innermost loop indexing A): A moves M*K once
    movement = analyze(gemm_chain(M, N, K, L), "mknl")
    entry = next(e for e in movement.entries if e.tensor == "A")
    assert entry.reloaded_by == ("m", "k")
    assert str(movement.movement("A")) == "M*K"


def test_insight_2_once_a_loop_moves_a_tensor_every_outer_loop_does():
    movement = analyze(gemm_chain(M, N, K, L), "mnlk")
    entry = next(e for e in movement.entries if e.tensor == "A")
    assert entry.reloaded_by == ("m", "n", "l", "k")
    assert str(movement.movement("A")) == "M*K*ceil(N/T_N)*ceil(L/T_L)"
    tiles = {"m": 64, "n": 32, "k": 32, "l": 64}
    assert movement.evaluate(tiles).per_tensor["A"] == M * K * (N // 32) * (L // 64)


def test_insight_3_private_producer_loops_never_move_consumer_data():
    chain = gemm_chain(M, N, K, L)
    assert chain.private_loops(0) == ("k",)
    for order in all_orders(chain):
        movement = analyze(chain, order)
        for entry in movement.entries:
            if entry.op == "E":
                assert "k" not in entry.reloaded_by
                assert "k" not in entry.movement.loops()


# -- chain derivation ------------------------------------------------------------------------------

def test_gemm_chain_from_ops_shares_two_loops():
    A = te.placeholder((64, 32), name="A")
    B = te.placeholder((32, 48), name="B")
    D = te.placeholder((48, 16), name="D")
    C = ops.matmul(A, B, name="C")
    E = ops.matmul(C, D, name="E")
    chain = chain_from_computes([C, E])
    assert chain.loop_names == ("i", "j", "k", "k1")
    assert chain.extents == {"i": 64, "j": 16, "k": 48, "k1": 32}
    assert chain.private_loops(0) == ("k1",)
    assert set(chain.shared_loops(0)) == {"i", "k"}
    assert chain.design_space_size() == 24
    assert [op.reduce_loops for op in chain.ops] == [("k1",), ("k",)]
    assert chain.ops[0].flops == 2 * 64 * 48 * 32
    roles = {a.tensor: a.role for op in chain.ops for a in op.accesses}
    assert roles == {"A": TensorRole.INPUT, "B": TensorRole.INPUT,
                     "C": TensorRole.INTERMEDIATE, "D": TensorRole.INPUT,
                     "E": TensorRole.OUTPUT}


def test_attention_chain_keeps_the_softmax_axis_whole():
    chain = attention_chain(batch=3, seq=40, head_dim=8)
    assert chain.loop_names == ("b", "m", "n", "l", "k")
    assert chain.loop("l").full_extent and "reduces" in chain.loop("l").reason
    assert chain.fixed_loops() == ("l",)
    assert chain.ops[0].attached == ("scaled", "P_max", "P_sub", "P_exp", "P_sum", "P")
    movement = analyze(chain, "bmlkn")
    # softmax's elementwise steps reuse the score tile; max and sum add one T_b x T_m vector
    tb, tm, tl, tk = (sym(Tile, x) for x in "bmlk")
    assert movement.usage(0) == tb * tm * tk + tb * tl * tk + tb * tm * tl + 2 * tb * tm
    assert movement.movement("P").is_zero()


def test_intermediate_read_outside_the_chain_is_written_out():
    C, E = gemm_chain_tensors(32, 16, 8, 24)
    extra = ops.relu(C, name="side")
    chain = chain_from_computes([C, E], Graph.from_outputs([E, extra]))
    assert chain.ops[0].output.role is TensorRole.OUTPUT
    movement = analyze(chain, "mlkn")
    assert str(movement.movement("C")) == "M*L"


def test_relaxed_value_is_footprint_times_real_trip_counts():
    movement = analyze(gemm_chain(M, N, K, L), "mlkn")
    tiles = {"m": 100.0, "n": 10.0, "k": 3.0, "l": 50.0}
    relaxed = movement.evaluate(tiles, relaxed=True)
    expected = (M * K * L / 50 + K * L * M / 100 + N * L * M / 100 + M * N * L / 50)
    assert relaxed.volume == pytest.approx(expected)


# -- bad input ---------------------------------------------------------------------------------

def test_memory_bound_op_cannot_head_a_chain():
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(FusionError, match="r is not a sum reduction"):
        chain_from_computes([ops.relu(A, name="r")])


def test_unconnected_computes_do_not_chain():
    A = te.placeholder((8, 8), name="A")
    first = ops.matmul(A, A, name="first")
    second = ops.matmul(A, A, name="second")
    with pytest.raises(FusionError, match="second does not depend on first"):
        chain_from_computes([first, second], Graph.from_outputs([first, second]))


def test_a_link_feeds_exactly_one_operand():
    A = te.placeholder((8, 8), name="A")
    C = ops.matmul(A, A, name="C")
    E = ops.matmul(C, C, name="E")
    with pytest.raises(FusionError, match="C is read at i and at k.*one access pattern"):
        chain_from_computes([C, E])
    S = ops.matmul(ops.relu(C, name="R"), C, name="S")
    with pytest.raises(FusionError, match="S reads 2 tensors derived from C"):
        chain_from_computes([C, S])


def test_skip_connections_are_refused():
    A = te.placeholder((8, 8), name="A")
    C = ops.matmul(A, A, name="C")
    E = ops.matmul(C, A, name="E")
    G = ops.matmul(E, ops.relu(C, name="Cr"), name="G")
    with pytest.raises(FusionError, match="G reads Cr, which depends on C.*skip connection"):
        chain_from_computes([C, E, G])


def test_orders_and_tiles_are_checked():
    movement = analyze(gemm_chain(M, N, K, L), "mlkn")
    with pytest.raises(FusionError, match="not a permutation"):
        analyze(gemm_chain(M, N, K, L), "mlk")
    with pytest.raises(FusionError, match="no tile size for loop n"):
        movement.evaluate({"m": 4, "k": 4, "l": 4})
    with pytest.raises(FusionError, match=r"tile size 0 of loop m must lie in \[1, 512\]"):
        movement.evaluate({"m": 0, "n": 4, "k": 4, "l": 4})
    with pytest.raises(FusionError, match="unknown loops q"):
        movement.evaluate({"m": 4, "n": 4, "k": 4, "l": 4, "q": 2})
    with pytest.raises(FusionError, match="tensor 'Z' is not part of chain C -> E"):
        movement.movement("Z")
