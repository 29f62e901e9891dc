"""The x86 schedule template for contractions (thesis §4.5 with §3.4's micro-kernel).

A compute that :func:`~tilecraft.microkernel.as_contraction` recognises (matmul, batch matmul,
dense, batch-1 convolutions through implicit im2col packing) is lowered to packing plus the
``outer_product_f32`` register-tile micro-kernel. The template's free parameters — what the
tuner searches — are ``MI`` and ``NR`` (the register tile, candidates from Eq. 3.4), ``KC`` (the
reduction slice, sized for L1) and ``MC`` (rows of A packed at once, sized for L2 and for an
even split across cores).

>>> from tilecraft import ops, te
>>> from tilecraft.microkernel import as_contraction
>>> c = as_contraction(ops.matmul(te.placeholder((100, 64), name="A"),
...                               te.placeholder((64, 48), name="B")))
>>> default_config(c, l1_bytes=49152, l2_bytes=1048576, threads=2)
{'MI': 8, 'NR': 48, 'KC': 64, 'MC': 56}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.microkernel import Blocking, Contraction, as_contraction, lower_contraction
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, register_blocking_candidates

#: below this many flops the default loop nest is as good and compiles faster
MIN_FLOPS = 2 * 32 * 32 * 32
CONFIG_KEYS = ("MI", "NR", "KC", "MC")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tile_candidates(contraction: Contraction, registers: int = 32,
                    count: int = 12) -> list[tuple[int, int]]:
    """``(MI, NR)`` register tiles, best first: Eq. 3.4's intensity discounted by the padding a
    tile wastes on this problem's M and N."""
    _, m, n, k = contraction.extents()
    scored = []
    for b in register_blocking_candidates(registers, ki=min(k, 256)):
        nr = b.ni * 16
        if nr not in OUTER_PRODUCT_F32.parameters["NR"].choices:
            continue
        m_use = m / (_ceil_div(m, b.mi) * b.mi)
        n_use = n / (_ceil_div(n, nr) * nr)
        scored.append((b.intensity * m_use * n_use, b.mi, nr))
    scored.sort(key=lambda s: (-s[0], -s[1] * s[2]))
    return [(mi, nr) for _, mi, nr in scored[:count]]


def default_config(contraction: Contraction, l1_bytes: int, l2_bytes: int,
                   threads: int) -> dict[str, int]:
    """The template's parameters without tuning: the best register tile, ``KC`` so that a
    ``KC x NR`` panel of B fills half of L1, ``MC`` so that the packed A block fits half of L2
    and every core gets work."""
    batch, m, _, k = contraction.extents()
    mi, nr = tile_candidates(contraction)[0]
    kc = max(16, min(k, (l1_bytes // 2) // (4 * nr) // 16 * 16 or 16))
    mc = max(mi, (l2_bytes // 2) // (4 * kc) // mi * mi)
    rows_per_thread = _ceil_div(m * batch, threads) if batch < threads else m
    mc = min(mc, _ceil_div(rows_per_thread, mi) * mi)
    return {"MI": mi, "NR": nr, "KC": kc, "MC": mc}


def lower_with_template(tensor: Tensor, options: LoweringOptions, l1_bytes: int, l2_bytes: int,
                        threads: int, config: Mapping[str, Any] | None = None
                        ) -> list[Kernel] | None:
    """The kernels of ``tensor`` under this template, or ``None`` when it does not apply (not a
    float32 contraction, or too small to pay for packing) and no ``config`` forces it."""
    contraction = as_contraction(tensor)
    if contraction is None:
        if config:
            raise LoweringError(f"compute {tensor.name}: the x86 micro-kernel template was "
                                "asked for, but the compute is not a float32 sum of products "
                                "C[batch, m, n] = sum A*B laid out [batch..., m..., n...]")
        return None
    if config is None and contraction.flops < MIN_FLOPS:
        return None
    chosen = default_config(contraction, l1_bytes, l2_bytes, threads)
    unknown = sorted(set(config or {}) - set(CONFIG_KEYS))
    if unknown:
        raise LoweringError(f"compute {tensor.name}: unknown micro-kernel template parameters "
                            f"{unknown}; the template takes {', '.join(CONFIG_KEYS)}")
    chosen.update({k: int(v) for k, v in (config or {}).items()})
    mi = chosen["MI"]
    blocking = Blocking(mi=mi, nr=chosen["NR"], kc=chosen["KC"],
                        mc=max(mi, chosen["MC"] // mi * mi))
    OUTER_PRODUCT_F32.resolve({"MI": mi, "NR": blocking.nr})
    return lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options)


__all__ = ["CONFIG_KEYS", "default_config", "lower_with_template", "tile_candidates"]


def template_space(tensor: Tensor, l1_bytes: int, l2_bytes: int, threads: int):
    """The search space of this template's free parameters for ``tensor`` (``None`` when the
    template does not apply): the register tile among the best Eq. 3.4 candidates, ``KC``, and
    ``MC`` as a number of register-tile strips. Points decode to ``lower_compute`` configs.

    >>> from tilecraft import ops, te
    >>> C = ops.matmul(te.placeholder((256, 256), name="A"), te.placeholder((256, 256), name="B"))
    >>> space = template_space(C, 49152, 1 << 20, 2)
    >>> space.space.size, sorted(space.decode(space.space.random_point(__import__("numpy")
    ...     .random.default_rng(0))))
    (560, ['KC', 'MC', 'MI', 'NR'])
    """
    from tilecraft.search import ChoiceSpace, Space
    from tilecraft.target.base import TemplateSpace

    contraction = as_contraction(tensor)
    if contraction is None:
        return None
    batch, m, _, k = contraction.extents()
    tiles = tile_candidates(contraction, count=8)
    kcs = sorted({min(kc, k) for kc in (32, 48, 64, 96, 128, 192, 256, 384, 512)})
    strips = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
    space = Space([("tile", ChoiceSpace(tiles)), ("KC", ChoiceSpace(kcs)),
                   ("strips", ChoiceSpace(strips))])

    def decode(point) -> dict[str, int]:
        values = space.values(point)
        mi, nr = values["tile"]
        rows = min(values["strips"] * mi, _ceil_div(m, mi) * mi)
        return {"MI": mi, "NR": nr, "KC": values["KC"], "MC": rows}

    del batch, l1_bytes, l2_bytes, threads
    return TemplateSpace(space, decode)
