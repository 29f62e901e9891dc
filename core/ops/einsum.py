"""Einstein summation: ``einsum("ij,jk->ik", a, b)`` as one tensor expression.

Each operand's subscripts name its dimensions with letters; a letter in the output is a
spatial axis of the result, a letter only in the inputs is summed over. The forms numpy and
ONNX accept:

- explicit (``"ij,jk->ik"``) or implicit output (``"ij,jk"``: the letters used once, in
  alphabetical order, after the broadcast ``...`` dimensions);
- a letter repeated within one operand reads its diagonal (``"ii->i"``, ``"ii"`` the trace);
- ``...`` stands for the leading (or inner) dimensions not named, broadcast between operands
  numpy's way (right-aligned, size 1 stretches); a letter of extent 1 broadcasts too;
- any number of operands (their product is summed), integer or float.

>>> from tilecraft import te
>>> a = te.placeholder((2, 3), name="a")
>>> b = te.placeholder((3, 4), name="b")
>>> print(einsum("ij,jk->ik", a, b, name="c").statement())
c[i, k] = sum(a[i, j] * b[j, k], axis=[j])
>>> einsum("...ij,...jk", te.placeholder((5, 2, 3), name="x"), b).shape
(5, 2, 4)
"""

from __future__ import annotations

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops.building import check_tensor, named_compute, operand, output_name
from tilecraft.te.tensor import Tensor

#: the label standing for the ``d``-th ``...`` dimension (right-aligned) inside this module
_ELLIPSIS = "…{}"


def _split_term(term: str, equation: str) -> tuple[list[str], bool]:
    """A term's letters (``...`` kept as one marker ``"..."``) and whether it has one."""
    if term.count("...") > 1 or (term.replace("...", "").count(".")):
        raise ShapeError(f"einsum: {equation!r}: the term {term!r} has a stray '.' or more "
                         "than one '...'; write '...' at most once per term")
    labels: list[str] = []
    rest = term
    while rest:
        if rest.startswith("..."):
            labels.append("...")
            rest = rest[3:]
            continue
        letter, rest = rest[0], rest[1:]
        if not letter.isascii() or not letter.isalpha():
            raise ShapeError(f"einsum: {equation!r}: {letter!r} in {term!r} is not a subscript;"
                             " subscripts are the letters a-z and A-Z (and '...')")
        labels.append(letter)
    return labels, "..." in labels


def parse_equation(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Per operand the label of each dimension, and the output's labels, with every ``...``
    expanded into labels of its own (right-aligned across operands).

    >>> parse_equation("ij,jk", [2, 2])
    ([['i', 'j'], ['j', 'k']], ['i', 'k'])
    >>> parse_equation("...i->i...", [3])
    ([['…1', '…0', 'i']], ['i', '…1', '…0'])
    """
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise ShapeError(f"einsum: {equation!r} has more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(f"einsum: {equation!r} has {len(terms)} input term(s) for "
                         f"{len(ranks)} operand(s); give one term per operand")
    expanded: list[list[str]] = []
    ellipsis_rank = 0
    for term, rank in zip(terms, ranks):
        labels, has_ellipsis = _split_term(term, equation)
        named = len(labels) - has_ellipsis
        if named > rank or (not has_ellipsis and named != rank):
            raise ShapeError(f"einsum: {equation!r}: the term {term!r} names {named} "
                             f"dimension(s) but its operand has {rank}")
        hidden = rank - named
        ellipsis_rank = max(ellipsis_rank, hidden)
        full: list[str] = []
        for label in labels:
            if label == "...":
                full.extend(_ELLIPSIS.format(d) for d in reversed(range(hidden)))
            else:
                full.append(label)
        expanded.append(full)
    broadcast = [_ELLIPSIS.format(d) for d in reversed(range(ellipsis_rank))]
    if arrow:
        out_labels, out_ellipsis = _split_term(rhs, equation)
        out: list[str] = []
        for label in out_labels:
            if label == "...":
                out.extend(broadcast)
            elif label in out:
                raise ShapeError(f"einsum: {equation!r}: the output names {label!r} twice")
            elif not any(label in term for term in expanded):
                raise ShapeError(f"einsum: {equation!r}: the output's {label!r} is in no "
                                 "input term")
            else:
                out.append(label)
        if broadcast and not out_ellipsis:
            raise ShapeError(f"einsum: {equation!r}: the inputs' '...' dimensions are missing "
                             "from the output; write '...' in the output term")
    else:
        counts: dict[str, int] = {}
        for term in expanded:
            for label in term:
                if not label.startswith("…"):
                    counts[label] = counts.get(label, 0) + 1
        out = broadcast + sorted(label for label, count in counts.items() if count == 1)
    return expanded, out


def einsum(equation: str, *operands: Tensor, out_dtype: DType | str | None = None,
           name: str | None = None) -> Tensor:
    """numpy's / ONNX's ``einsum`` of ``operands`` (see the module's docstring for the forms).

    Operands of different dtypes are refused unless ``out_dtype`` names the type to compute
    in; the result has the operands' dtype (or ``out_dtype``).
    """
    op = "einsum"
    if not isinstance(equation, str):
        raise ShapeError(f"einsum: the equation must be a str like 'ij,jk->ik', got "
                         f"{type(equation).__name__}")
    if not operands:
        raise ShapeError(f"einsum: {equation!r} needs at least one operand")
    for position, tensor in enumerate(operands):
        check_tensor(tensor, op, f"operands[{position}]")
    dtypes = {t.dtype for t in operands}
    if out_dtype is not None:
        dtype = DType.parse(out_dtype)
    elif len(dtypes) == 1:
        (dtype,) = dtypes
    else:
        raise ShapeError(f"einsum: {equation!r}: the operands have different dtypes "
                         f"({', '.join(sorted(d.value for d in dtypes))}); cast them to one "
                         "or give out_dtype")
    terms, out_labels = parse_equation(equation, [t.ndim for t in operands])
    extents: dict[str, int] = {}
    for tensor, term in zip(operands, terms):
        seen: dict[str, int] = {}
        for label, extent in zip(term, tensor.shape):
            if label in seen and seen[label] != extent:
                raise ShapeError(f"einsum: {equation!r}: {tensor.name} repeats {label!r} over "
                                 f"dimensions of extents {seen[label]} and {extent}; a "
                                 "diagonal needs equal extents")
            seen[label] = extent
            known = extents.get(label, 1)
            if extent != 1 and known != 1 and extent != known:
                raise ShapeError(f"einsum: {equation!r}: {label!r} has extent {known} in one "
                                 f"operand and {extent} in {tensor.name} (shape "
                                 f"{tensor.shape}); extents must agree or be 1")
            extents[label] = max(known, extent)
    summed = [label for term in terms for label in term if label not in out_labels]
    summed = list(dict.fromkeys(summed))
    reduce_axes = {label: te.reduce_axis(extents[label], _axis_name(label)) for label in summed}

    def body(*out_axes: te.Expr) -> te.Expr:
        index = dict(zip(out_labels, out_axes)) | reduce_axes
        product: te.Expr | None = None
        for tensor, term in zip(operands, terms):
            indices = tuple(0 if extent == 1 and extents[label] != 1 else index[label]
                            for label, extent in zip(term, tensor.shape))
            load = operand(tensor[indices] if indices else tensor[()], dtype)
            product = load if product is None else product * load
        assert product is not None
        return te.sum(product, axis=list(reduce_axes.values())) if reduce_axes else product

    return named_compute([extents[label] for label in out_labels],
                         [_axis_name(label) for label in out_labels], body,
                         output_name(name, op))


def _axis_name(label: str) -> str:
    """``i`` for the letter ``i``, ``e0`` for the innermost ``...`` dimension."""
    return f"e{label[1:]}" if label.startswith("…") else label


__all__ = ["einsum", "parse_equation"]
