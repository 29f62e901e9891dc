"""The fused chain kernel: its Kernel IR (one call of the plugin's fused-chain micro-kernel,
:data:`FUSED_CHAIN`), its CUDA C (``templates/fused_chain.cu.j2`` with the §3.4.1.2 WMMA
outer-product micro-kernel of ``templates/wmma_outer_product.cu.j2``) and the performance
model's counts of it (:class:`~tilecraft_nvidia_tc.model.KernelProfile`).

>>> from tilecraft import ops, te
>>> from tilecraft_nvidia_tc.fusion.chain import match_chain
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> A = te.placeholder((1, 17, 24), name="A", dtype="float16")
>>> B = te.placeholder((1, 24, 33), name="B", dtype="float16")
>>> D = te.placeholder((1, 33, 40), name="D", dtype="float16")
>>> chain = match_chain(ops.batch_matmul(ops.batch_matmul(A, B, name="C"), D, name="E"))
>>> kernel = lower_fused_chain(chain, ChainTiles(32, 32, warps=1), load_target_spec())
>>> source = fused_source(kernel, load_target_spec())
>>> source.meta["grid"], source.meta["block"], source.text.count("mma_sync(acc")
([1, 1, 1], [32, 1, 1], 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import Buffer, Kernel, LaunchConfig, MicroKernelCall, Region
from tilecraft.target.base import Source
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import const
from tilecraft_nvidia_tc.fusion.chain import ConvGeometry, FusedChain
from tilecraft_nvidia_tc.fusion.tiles import (
    ChainTiles,
    FusedResourceError,
    SharedLayout,
    check_resources,
)

__all__ = ["FUSED_CHAIN", "FusedKernelConfig", "fused_config", "fused_profile", "fused_source",
           "lower_fused_chain"]

#: the name of the micro-kernel call a fused chain kernel's body is
FUSED_CHAIN = "nvidia_tc.fused_chain"
WMMA = "wmma_m16n16k16_f16_f32"


@dataclass(frozen=True)
class FusedKernelConfig:
    """What the template needs: the chain's sizes, the middle, the tiles and layout."""

    batch: int
    m: int
    k: int
    l: int  # noqa: E741
    n: int
    softmax: bool
    scale: float | None
    tiles: ChainTiles
    layout: SharedLayout
    relu: bool = False
    conv: ConvGeometry | None = None

    @property
    def grid(self) -> tuple[int, int, int]:
        """Row tiles, batches, column tiles of ``E``."""
        return (math.ceil(self.m / self.tiles.tm), self.batch, self.n_blocks)

    @property
    def k_chunks(self) -> int:
        """The slices of ``K`` staged one after the other per step (1: ``A``'s tile whole)."""
        return math.ceil(self.k / self.layout.kp) if self.tiles.tk else 1

    @property
    def n_blocks(self) -> int:
        """The blocks over ``N`` (each recomputes the intermediate of its rows)."""
        return math.ceil(self.n / self.layout.np_) if self.tiles.tn else 1

    @property
    def vector(self) -> bool:
        """16-byte cp.async staging (:func:`~tilecraft_nvidia_tc.fusion.tiles.vector_staging`)."""
        return self.conv is None and self.k % 8 == 0 and self.l % 8 == 0 and self.n % 8 == 0

    @property
    def steps(self) -> int:
        return math.ceil(self.l / self.tiles.tl)


def lower_fused_chain(chain: FusedChain, tiles: ChainTiles, spec: TargetSpec,
                      name: str | None = None) -> Kernel:
    """The fused kernel of ``chain`` with ``tiles``; a
    :class:`~tilecraft_nvidia_tc.fusion.tiles.FusedResourceError` names the kernel, the limit
    and the value when they do not fit the spec."""
    kernel_name = name or f"{chain.computes[0].name}_{chain.e.name}_fused"
    layout = SharedLayout.of(tiles, chain.k, chain.n, chain.softmax)
    check_resources(kernel_name, tiles, layout, spec)
    if tiles.stages == 2 and tiles.tk and tiles.tk < chain.k:
        raise FusedResourceError(f"kernel {kernel_name}: B and D are double-buffered only with "
                                 f"A's tile whole (TK={tiles.tk} < K={chain.k}); use stages=1")
    if tiles.o_frags and chain.softmax:
        raise FusedResourceError(f"kernel {kernel_name}: O stays in shared memory with a "
                                 "softmax (its rows are rescaled); use o_frags=0")
    buffers = tuple(Buffer(t.name, t.shape, DType.FLOAT16) for t in (chain.a, chain.b, chain.d,
                                                                       chain.e))
    config = FusedKernelConfig(chain.batch, chain.m, chain.k, chain.l, chain.n, chain.softmax,
                               chain.scale, tiles, layout, chain.relu, chain.conv)
    regions = tuple(Region(b, tuple(const(0) for _ in b.shape), b.shape) for b in buffers)
    params = (("tm", tiles.tm), ("tl", tiles.tl), ("fm", tiles.fm), ("fn", tiles.fn),
              ("warps", tiles.warps), ("stages", tiles.stages), ("tk", tiles.tk),
              ("tn", tiles.tn), ("o_frags", tiles.o_frags), ("softmax", chain.softmax),
              ("scale", chain.scale))
    body = MicroKernelCall(FUSED_CHAIN, regions, params)
    scaled = f"{chain.scale:g} * " if chain.scale is not None else ""
    middle = f"softmax({scaled}T)" if chain.softmax else "relu(T)" if chain.relu else "T"
    if chain.conv is not None:
        middle += f" (T: {chain.conv.kernel_h}x{chain.conv.kernel_w}/{chain.conv.stride} conv " \
                  "as implicit GEMM, D: the 1x1 conv)"
    k_part = f"TK={tiles.tk}" if tiles.tk and tiles.tk < chain.k else f"K={chain.k} whole"
    n_part = f"TN={tiles.tn}" if tiles.tn and tiles.tn < chain.n else f"N={chain.n} whole"
    o_part = f"O in registers ({tiles.o_frags} tile(s) per warp)" if tiles.o_frags else \
        "O in shared"
    schedule = (f"Chimera fused chain on Tensor Cores: E = {middle} @ D, TM={tiles.tm} "
                f"TL={tiles.tl} ({k_part}, {n_part}), {tiles.warps} warp(s) of "
                f"{tiles.fm}x{tiles.fn} WMMA fragments, {o_part}, {tiles.stages} stage(s) of "
                f"B/D, {layout.total_bytes} B shared")
    return Kernel(kernel_name, buffers, (chain.e.name,), body,
                  launch=LaunchConfig(config.grid, (tiles.threads, 1, 1), layout.total_bytes),
                  attrs={"schedule": schedule, "fused_chain": config,
                         "fused": chain.names})


def fused_config(kernel: Kernel) -> FusedKernelConfig | None:
    """The fused chain's configuration when ``kernel`` is a fused chain kernel, else None."""
    config = kernel.attrs.get("fused_chain")
    return config if isinstance(config, FusedKernelConfig) and isinstance(
        kernel.body, MicroKernelCall) and kernel.body.micro_kernel == FUSED_CHAIN else None


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tilecraft_nvidia_tc", "templates"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def fused_source(kernel: Kernel, spec: TargetSpec, target: str = "nvidia_tc",
                 arch: int = 80) -> Source:
    """The CUDA C of a fused chain kernel, with the launch in ``meta`` as the code generator
    gives it (:func:`tilecraft_nvidia_tc.codegen.generate_cuda`)."""
    config = fused_config(kernel)
    if config is None:
        raise ValueError(f"kernel {kernel.name} is not a fused chain kernel")
    env, tiles, layout = _environment(), config.tiles, config.layout
    micro = env.get_template("wmma_outer_product.cu.j2")
    mk_zero = f"tc_wmma_outer_{tiles.fm}x{tiles.fn}"
    mk_acc, mk_reg = f"{mk_zero}_acc", f"{mk_zero}_regs"
    # the micro-kernels the body calls: S's first slice zero-filled, S's further slices and O
    # in shared memory accumulated there, O in registers accumulated in the warp's fragments
    micro_kernels = micro.render(name=mk_zero, fm=tiles.fm, fn=tiles.fn, accumulate=False,
                                 registers=False)
    if config.k_chunks > 1 or not tiles.o_frags:
        micro_kernels += micro.render(name=mk_acc, fm=tiles.fm, fn=tiles.fn, accumulate=True,
                                      registers=False)
    if tiles.o_frags:
        micro_kernels += micro.render(name=mk_reg, fm=tiles.fm, fn=tiles.fn, accumulate=True,
                                      registers=True)
    rows, cols = 16 * tiles.fm, 16 * tiles.fn
    grid = list(config.grid)
    access = _accessors(config)
    text = env.get_template("fused_chain.cu.j2").render(
        entry=kernel.name, target=target, arch=arch, batch=config.batch, m=config.m,
        k=config.k, l=config.l, n=config.n, softmax=config.softmax, scale=config.scale,
        scale_literal=f"{config.scale:.9g}f" if config.scale is not None else "",
        tm=tiles.tm, tl=tiles.tl, fm=tiles.fm, fn=tiles.fn, warps=tiles.warps,
        threads=tiles.threads, grid=grid, block=[tiles.threads, 1, 1],
        shared_bytes=layout.total_bytes, off=layout.offsets, kp=layout.kp, np_=layout.np_,
        lda=layout.lda, ldb=layout.ldb, lds=layout.lds, ldp=layout.ldp, ldd=layout.ldd,
        ldo=layout.ldo, s_tiles_r=tiles.tm // rows, s_tiles_c=tiles.tl // cols,
        o_tiles_r=tiles.tm // rows, o_tiles_c=layout.np_ // cols, mk_zero=mk_zero,
        mk_acc=mk_acc, mk_reg=mk_reg, micro_kernels=micro_kernels, steps=config.steps,
        k_chunks=config.k_chunks, o_frags=tiles.o_frags,
        stages=tiles.stages, vec=config.vector, relu=config.relu, helpers=access.pop("helpers"),
        **access)
    params = [{"name": b.name, "dtype": b.dtype.value, "shape": list(b.shape),
               "output": b.name in kernel.outputs, "kind": "buffer"} for b in kernel.params]
    shared = layout.total_bytes
    threads = spec.threads
    default_limit = threads.shared_bytes_per_block if threads else 49152
    meta: dict[str, Any] = {
        "entry": kernel.name, "grid": grid, "block": [tiles.threads, 1, 1],
        "dynamic_shared_bytes": shared, "needs_smem_optin": shared > (default_limit or 49152),
        "static_shared_bytes": 0, "params": params, "param_alignment": 256, "arch": arch,
        "uses_async_copy": config.vector, "fused_chain": True,
    }
    return Source(target, kernel.name, "cuda", text, kernel.name, meta=meta, suffix="cu")


def _accessors(config: FusedKernelConfig) -> dict[str, Any]:
    """The template's element accessors ``a_at(row, col)`` ... ``e_at(row, col)`` (C lvalues
    of the operands seen as the GEMM chain's matrices) and the device helpers they call."""
    k, l_, n = config.k, config.l, config.n
    conv = config.conv
    if conv is None:
        return {"a_at": lambda r, c: f"gA[({r}) * {k} + ({c})]",
                "b_at": lambda r, c: f"gB[({r}) * {l_} + ({c})]",
                "d_at": lambda r, c: f"gD[({r}) * {n} + ({c})]",
                "e_at": lambda r, c: f"gE[({r}) * {n} + ({c})]", "helpers": ""}
    helpers = _environment().get_template("conv_im2col.cu.j2").render(c=conv, n=n)
    return {"a_at": lambda r, c: f"tc_im2col(gA, {r}, {c})",
            "b_at": lambda r, c: f"gB[({c}) * {k} + ({r})]",      # W1[oc1, kk]
            "d_at": lambda r, c: f"gD[({c}) * {l_} + ({r})]",     # W2[oc2, oc1]
            "e_at": lambda r, c: f"gE[tc_nchw({r}, {c})]", "helpers": helpers}


def fused_profile(kernel: Kernel) -> Any:
    """The performance model's counts of a fused chain kernel
    (:class:`~tilecraft_nvidia_tc.model.KernelProfile`), by hand from the template: Tensor
    Core issues of both products, shared wavefronts of the staging, the fragments and the
    middle, the global bytes each block reads, the compulsory DRAM bytes."""
    from tilecraft_nvidia_tc.model.profile import KernelProfile

    config = fused_config(kernel)
    if config is None:
        raise ValueError(f"kernel {kernel.name} is not a fused chain kernel")
    t, lay = config.tiles, config.layout
    blocks = config.grid[0] * config.batch * config.n_blocks
    steps, chunks = config.steps, config.k_chunks
    rows, cols = 16 * t.fm, 16 * t.fn
    s_tiles, o_tiles = (t.tm // rows) * (t.tl // cols), (t.tm // rows) * (lay.np_ // cols)
    # Tensor Core issues per block: both products, all their fragment pairs
    issues = steps * (s_tiles * t.fm * t.fn * chunks * (lay.kp // 16)
                      + o_tiles * t.fm * t.fn * (t.tl // 16))
    fragment_waves = 4      # a 16x16 float16 fragment: 512 bytes, 4 wavefronts of 128
    accumulator_waves = 8   # a 16x16 float32 fragment
    # a float16 staged per lane and step: 32 x 2 bytes per wavefront; 16-byte chunks: 64
    per_wave = 64 if config.vector else 32
    # S's micro-kernel: fragments of each slice, its accumulators stored (and loaded again
    # for every slice after the first)
    s_waves = s_tiles * (chunks * (lay.kp // 16) * (t.fm + t.fn) * fragment_waves
                         + (2 * chunks - 1) * t.fm * t.fn * accumulator_waves)
    # O's: fragments of P and D; in shared memory its accumulators loaded and stored per step,
    # in registers stored once at the end
    o_waves = o_tiles * ((t.tl // 16) * (t.fm + t.fn) * fragment_waves
                         + (0 if t.o_frags else 2 * t.fm * t.fn * accumulator_waves))
    staged_a = t.tm * lay.kp * chunks / per_wave          # A (or its slices) per step
    shared = ((0 if chunks > 1 else staged_a)                # A staged once
              + (0 if t.o_frags else t.tm * lay.np_ / 32)   # O zeroed
              + steps * ((staged_a if chunks > 1 else 0)
                         + (chunks * lay.kp * t.tl + t.tl * lay.np_) / per_wave  # B and D
                         + s_waves + o_waves)
              + (o_tiles * t.fm * t.fn * accumulator_waves if t.o_frags else 0)
              + t.tm * lay.np_ / 32)                          # O read for the store
    if config.softmax:
        shared += steps * (t.tm * t.tl * 4 / 32 + 2 * t.tm * lay.np_ / 32)
        elementwise = steps * (t.tm * t.tl * 12 + t.tm * lay.np_)
    else:
        shared += steps * t.tm * t.tl * 2 / 32
        elementwise = steps * t.tm * t.tl
    width = min(lay.np_, config.n)
    global_bytes = 2 * (t.tm * config.k * (steps if chunks > 1 else 1) + config.k * config.l
                        + config.l * width + t.tm * width)
    dram = sum(2 * b.size for b in kernel.params)   # each operand once
    return KernelProfile(
        kernel.name, blocks=blocks, threads_per_block=t.threads,
        instructions={"float32": float(blocks * elementwise)},
        flops=float(blocks * (issues * 2 * 16 ** 3 + elementwise)),
        tensor_issues={WMMA: float(blocks * issues)}, tensor_macs=float(blocks * issues * 4096),
        shared_wavefronts=float(blocks * shared), shared_bytes_moved=float(blocks * shared * 128),
        l2_bytes=float(blocks * global_bytes), global_bytes_requested=float(blocks * global_bytes),
        dram_bytes=float(dram),
        # the double buffer has the next step's tiles in flight during this one
        global_rounds=float(2 if t.stages == 2 else 1 + steps * chunks),
        shared_bytes_per_block=lay.total_bytes, registers_per_thread=t.registers_per_thread,
        tensor_warps_per_block=min(t.warps, max(s_tiles, o_tiles)))
