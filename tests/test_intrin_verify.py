"""Mapping verification (thesis §5.5, Algorithm 4, Fig. 5.3) and forcing mappings by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.errors import TilecraftError
from tilecraft.intrin import (
    IntrinsicMapping,
    MappingError,
    OperandBinding,
    ReasonKind,
    algorithm4,
    force_mapping,
    match,
    verify,
)
from tilecraft.intrin.examples import wmma
from tilecraft.intrin.verify import boolean_product, mapping_from_names
from tilecraft.ops.conv_transpose import conv_transpose2d_zero_insert

WMMA = wmma(16, 16, 16)
F32 = "float32"


def conv2d(padding: int = 0) -> te.Tensor:
    x = te.placeholder((2, 3, 7, 7), "float16", name="x")
    w = te.placeholder((5, 3, 3, 3), "float16", name="w")
    return ops.conv2d(x, w, padding=padding, out_dtype=F32, name="y")


def rejected(compute: te.Tensor, loops: dict[str, list[str]], **kwargs) -> MappingError:
    with pytest.raises(MappingError) as info:
        force_mapping(compute, WMMA, loops, **kwargs)
    assert isinstance(info.value, TilecraftError) and info.value.reasons
    return info.value


def test_all_35_conv2d_mappings_verify() -> None:
    y = conv2d(padding=1)
    result = match(y, WMMA)
    assert len(result.mappings) == 35
    for mapping in result.mappings:
        outcome = verify(y, WMMA, mapping)
        assert outcome.ok and outcome.reasons == ()


def test_figure_5_3_matrices_and_algorithm_4() -> None:
    y = conv2d()
    mapping = force_mapping(y, WMMA, {"i1": ["n", "h", "w"], "i2": ["k"],
                                      "r1": ["rc", "rh", "rw"]})
    outcome = verify(y, WMMA, mapping)
    assert outcome.ok
    x, m, z = outcome.x, outcome.y, outcome.z
    assert x.rows == ("x", "w", "y") and x.columns == ("n", "k", "h", "w", "rc", "rh", "rw")
    assert x.values.astype(int).tolist() == [[1, 0, 1, 1, 1, 1, 1],
                                             [0, 1, 0, 0, 1, 1, 1],
                                             [1, 1, 1, 1, 0, 0, 0]]
    assert m.values.astype(int).tolist() == [[1, 0, 1, 1, 0, 0, 0],
                                             [0, 1, 0, 0, 0, 0, 0],
                                             [0, 0, 0, 0, 1, 1, 1]]
    assert z.values.astype(int).tolist() == [[1, 0, 1], [0, 1, 1], [1, 1, 0]]
    # every loop is mapped, so the thesis's Algorithm 4 applies as written
    assert algorithm4(x.values, m.values, z.values)
    assert "rc rh rw" in str(x)


def test_thesis_wrong_mapping_n_and_k_on_i1_is_rejected_with_matrix_entries() -> None:
    error = rejected(conv2d(), {"i1": ["n", "k", "h", "w"], "r1": ["rc", "rh", "rw"]})
    entries = {(r.matrix, r.entry, r.expected, r.got) for r in error.reasons}
    assert entries == {("X", ("x", "k"), False, True), ("X", ("w", "k"), True, False),
                       ("Z", ("Src2", "i1"), False, True)}
    assert all(r.kind is ReasonKind.ACCESS_MATRIX for r in error.reasons)
    reason = next(r for r in error.reasons if r.entry == ("w", "k"))
    assert (reason.tensor, reason.operand, reason.software_loop, reason.intrinsic_loop) == (
        "w", "Src2", "k", "i1")
    assert "k indexes w (Src2) but is mapped to i1" in str(error)
    # the raw Algorithm 4 rejects the same mapping (with k's i2 padded)
    y = conv2d()
    mapping = mapping_from_names(y, WMMA, {"i1": ["n", "k", "h", "w"],
                                           "r1": ["rc", "rh", "rw"]})[0]
    outcome = verify(y, WMMA, mapping)
    x, y, z = outcome.x.values, outcome.y.values, outcome.z.values
    assert not np.array_equal(boolean_product(z, y), x)
    # loops of another compute are no loops of this one
    stray = verify(conv2d(), WMMA, mapping)
    assert not stray.ok and stray.reasons[0].kind is ReasonKind.UNKNOWN_NAME


def test_dimension_conflict_is_named() -> None:
    error = rejected(conv2d(), {"i1": ["h"], "i2": ["k"], "r1": ["rh"]})
    assert [r.kind for r in error.reasons] == [ReasonKind.DIMENSION_CONFLICT] * 2
    first = error.reasons[0]
    assert (first.tensor, first.operand, first.software_loop) == ("x", "Src1", "h")
    assert "both index dimension 2 of x" in first.message


def test_an_intrinsic_loop_left_empty_next_to_a_free_candidate_is_rejected() -> None:
    error = rejected(conv2d(), {"i1": ["n"], "r1": ["rc"]})
    (reason,) = error.reasons
    assert reason.kind is ReasonKind.EMPTY_INTRINSIC_LOOP
    assert (reason.intrinsic_loop, reason.software_loop) == ("i2", "k")


def test_loop_mapped_twice_kind_and_index_form_are_reasons() -> None:
    y = conv2d()
    twice = IntrinsicMapping(WMMA.name, match(y, WMMA).mappings[0].operands,
                             (("i1", (y.axes[0],)), ("i2", (y.axes[0], y.axes[1])),
                              ("r1", (y.reduce_axes[0],))))
    kinds = {r.kind for r in verify(y, WMMA, twice).reasons}
    assert ReasonKind.LOOP_MAPPED_TWICE in kinds
    error = rejected(y, {"i1": ["n", "rc"], "i2": ["k"], "r1": ["rh"]})
    assert ReasonKind.LOOP_KIND in {r.kind for r in error.reasons}
    t = conv_transpose2d_zero_insert(te.placeholder((1, 4, 5, 5), "float16", name="x"),
                                     te.placeholder((4, 6, 3, 3), "float16", name="w"),
                                     out_dtype=F32, name="t")
    error = rejected(t, {"i1": ["n"], "i2": ["o"], "r1": ["rc", "rh"]})
    (reason,) = error.reasons
    assert reason.kind is ReasonKind.INDEX_FORM
    assert (reason.software_loop, reason.tensor) == ("rh", "w")


def test_unknown_names_and_dtypes_are_reported() -> None:
    y = conv2d()
    with pytest.raises(MappingError, match="has no loop 'i3'") as info:
        force_mapping(y, WMMA, {"i3": ["n"]})
    assert info.value.reasons[0].kind is ReasonKind.UNKNOWN_NAME
    with pytest.raises(MappingError, match="has no loop named 'q'; its loops are n, k, h"):
        force_mapping(y, WMMA, {"i1": ["q"]})
    with pytest.raises(MappingError, match="no factor assignment"):
        force_mapping(y, WMMA, {"i1": ["n"]}, operands={"Src1": "y"})
    f32 = ops.matmul(te.placeholder((4, 5), name="A"), te.placeholder((5, 6), name="B"))
    error = rejected(f32, {"i1": ["i"], "i2": ["j"], "r1": ["k"]})
    assert {(r.kind, r.tensor) for r in error.reasons} >= {(ReasonKind.DTYPE, "A")}
    other = IntrinsicMapping("mma_other", (), ())
    assert verify(y, WMMA, other).reasons[0].kind is ReasonKind.UNKNOWN_NAME
    relu = verify(ops.relu(y), WMMA, other)
    assert not relu.ok and relu.reasons[0].kind is ReasonKind.NOT_PRODUCT_SUM


def test_force_mapping_with_explicit_operands() -> None:
    gemm = ops.matmul(te.placeholder((4, 5), "float16", name="A"),
                      te.placeholder((5, 6), "float16", name="B"), out_dtype=F32, name="C")
    swapped = force_mapping(gemm, WMMA, {"i1": ["j"], "i2": ["i"], "r1": ["k"]},
                            operands={"Src1": "B", "Src2": "A"})
    assert swapped.operands == (OperandBinding("Src1", "B", 1), OperandBinding("Src2", "A", 0),
                                OperandBinding("Dst", "C", None))
    # without operands, the correspondence that verifies is found
    assert force_mapping(gemm, WMMA, {"i1": ["j"], "i2": ["i"], "r1": ["k"]}) == swapped
    error = rejected(gemm, {"i1": ["i"], "i2": ["j"], "r1": ["k"]},
                     operands={"Src1": "B", "Src2": "A"})
    assert ReasonKind.ACCESS_MATRIX in {r.kind for r in error.reasons}


def test_verification_accepts_exactly_the_matched_mappings_of_conv1d() -> None:
    """Every assignment of conv1d's 5 loops to i1 / i2 / r1 / nothing (4^5 of them):
    verification accepts exactly the 6 mappings matching enumerates."""
    x = te.placeholder((2, 3, 9), "float16", name="x")
    w = te.placeholder((4, 3, 3), "float16", name="w")
    y = ops.conv1d(x, w, out_dtype=F32, name="y")
    result = match(y, WMMA)
    expected = {m.key() for m in result.mappings}
    operands = result.mappings[0].operands
    loops = y.axes + y.reduce_axes
    accepted = set()
    for choice in itertools.product((None, "i1", "i2", "r1"), repeat=len(loops)):
        table = tuple((name, tuple(lp for lp, c in zip(loops, choice) if c == name))
                      for name in ("i1", "i2", "r1"))
        mapping = IntrinsicMapping(WMMA.name, operands, table)
        if verify(y, WMMA, mapping).ok:
            accepted.add(mapping.key())
    assert accepted == expected and len(expected) == 6
