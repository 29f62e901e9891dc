"""The x86 plugin's micro-kernels (thesis §3.4.1.2): declarations, register blocking, rendering.

``outer_product_f32`` is Algorithm 2: ``C[MI, NR] += A[KI, MI]^T x B[KI, NR]`` on float32 with
the ``MI x NR/16`` accumulators in zmm registers for the whole ``k`` loop. Its implementation
is the Jinja template ``templates/outer_product.ll.jinja`` (LLVM IR), rendered per parameter set.

:func:`register_blocking` solves Eq. 3.4 for the register tile: maximise the arithmetic
intensity ``MI*NI*KI / (KI*(MI+NI) + 2*MI*NI)`` subject to ``MI*NI + NI + MII <= registers``.

>>> register_blocking(registers=32, ki=256)
RegisterBlocking(mi=5, ni=5, mii=1, intensity=2.452)
>>> [b.mi * b.ni for b in register_blocking_candidates(registers=32, ki=256)[:3]]
[25, 24, 24]
>>> "fma.v16f32" in render("outer_product_f32", {"MI": 2, "NR": 16, "KI": 4}, "mk")
True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2

from tilecraft.errors import CodegenError
from tilecraft.target.microkernel import MicroKernelDecl

#: Algorithm 2's outer-product kernel on float32 (A packed k-major, MI per k; B NR per k)
OUTER_PRODUCT_F32 = MicroKernelDecl(
    name="outer_product_f32",
    description="register-tile outer product (thesis Algorithm 2): C[MI,NR] += A[KI,MI]^T B[KI,NR]",
    loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
           {"name": "n", "extent": "NR", "kind": "spatial"},
           {"name": "k", "extent": "KI", "kind": "reduce"}],
    operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["KI", "MI"],
               "index": ["k", "m"]},
              {"name": "B", "role": "src", "dtype": "float32", "shape": ["KI", "NR"],
               "index": ["k", "n"]},
              {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MI", "NR"],
               "index": ["m", "n"]}],
    semantics="C[m, n] += A[k, m] * B[k, n]",
    template="templates/outer_product.ll.jinja",
    parameters={"MI": {"default": 5, "minimum": 1, "maximum": 28,
                       "description": "rows of the register tile"},
                "NR": {"default": 80, "choices": [16, 32, 48, 64, 80, 96, 112, 128],
                       "description": "columns of the register tile (NI zmm vectors of 16)"},
                "KI": {"default": 256, "minimum": 1, "maximum": 4096,
                       "description": "k steps per call (the KC slice)"}},
)

MICRO_KERNELS: dict[str, MicroKernelDecl] = {OUTER_PRODUCT_F32.name: OUTER_PRODUCT_F32}

#: k steps per iteration of the template's k loop
UNROLL = 4


@dataclass(frozen=True)
class RegisterBlocking:
    """One solution of Eq. 3.4: an ``mi x ni`` tile of zmm accumulators, ``mii`` registers for
    broadcast A values, and its arithmetic intensity (FMAs per load/store)."""

    mi: int
    ni: int
    mii: int
    intensity: float


def register_blocking_candidates(registers: int = 32, ki: int = 256,
                                 max_ni: int = 8) -> list[RegisterBlocking]:
    """Every feasible ``(MI, NI, MII)`` of Eq. 3.4 with the smallest ``MII`` dividing ``MI``,
    best intensity first (ties: more accumulators, then fewer columns)."""
    found = []
    for ni in range(1, max_ni + 1):
        for mi in range(1, registers):
            mii = 1
            used = mi * ni + ni + mii
            if used > registers:
                break
            intensity = mi * ni * ki / (ki * (mi + ni) + 2 * mi * ni)
            found.append(RegisterBlocking(mi, ni, mii, round(intensity, 3)))
    return sorted(found, key=lambda b: (-b.intensity, -b.mi * b.ni, b.ni))


def register_blocking(registers: int = 32, ki: int = 256) -> RegisterBlocking:
    """The Eq. 3.4 optimum for ``registers`` vector registers and ``ki`` k steps per call."""
    return register_blocking_candidates(registers, ki)[0]


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tilecraft_x86_avx512", "templates"),
                              undefined=jinja2.StrictUndefined, autoescape=False)


def render(name: str, params: Mapping[str, int], function: str) -> str:
    """LLVM IR of micro-kernel ``name`` with parameter values ``params`` (declared defaults
    for the rest) as the internal function ``function``.

    Raises :class:`CodegenError` naming the plugin, the template and the problem when the
    micro-kernel is unknown, a parameter is out of range or the template fails to render.
    """
    decl = MICRO_KERNELS.get(name)
    if decl is None:
        raise CodegenError(f"plugin x86_avx512 has no micro-kernel {name!r}; it provides "
                           f"{', '.join(MICRO_KERNELS)}")
    try:
        values = decl.resolve(dict(params))
    except Exception as err:  # TargetError from resolve
        raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: {err}") from err
    if name == OUTER_PRODUCT_F32.name and values["NR"] % 16:
        raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: NR = {values['NR']} must be "
                           "a multiple of 16 (whole zmm vectors)")
    try:
        template = _environment().get_template(decl.template.removeprefix("templates/"))
        return template.render(name=f'"{function}"', UNROLL=UNROLL,
                               attributes="alwaysinline nounwind", **values)
    except jinja2.TemplateError as err:
        raise CodegenError(f"plugin x86_avx512: micro-kernel {name}: template {decl.template} "
                           f"failed to render: {err}") from err


__all__ = ["MICRO_KERNELS", "OUTER_PRODUCT_F32", "RegisterBlocking", "register_blocking",
           "register_blocking_candidates", "render"]
