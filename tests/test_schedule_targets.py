"""Schedules on targets other than a CPU: the core assumes none. A GPU-like spec binds loops to
blocks and threads and caches tiles in shared memory; an FPGA-like spec pipelines loops and
buffers and partitions arrays on chip. Each lowered kernel is verified against its spec and
interpreted against the reference."""

from __future__ import annotations

import numpy as np

from tilecraft import ops, te
from tilecraft.kernel_ir.nodes import Allocate, Copy, For, LaunchConfig, LoopKind, Seq, Stmt
from tilecraft.lower import LoweringOptions
from tilecraft.schedule import create_schedule
from tilecraft.schedule.verify import check_schedule
from tilecraft.target.spec import load_spec


def _spec(name: str, levels: list[tuple[str, int | None]], primitives: list[str],
          loop_kinds: list[str], vector_bits: int = 0, **extra: object) -> object:
    return load_spec({**extra,
        "name": name, "api_version": 1, "version": "0",
        "memory": {"levels": [
            {"name": level, "size_bytes": size, "bandwidth_bytes_per_cycle": 32,
             "kind": "dram" if size is None else "scratchpad"} for level, size in levels]},
        "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": vector_bits},
        "primitives": primitives, "loop_kinds": loop_kinds,
        "evaluation": "estimate", "capabilities": {"models_performance": True}})


GPU = _spec("toy_gpu", [("global", None), ("shared", 49152), ("register", 1024)],
            ["split", "fuse", "reorder", "tile", "unroll", "inline", "compute_at", "cache",
             "bind"], ["serial", "bound", "unrolled"],
            threads={"axes": [{"name": f"{prefix}.{letter}", "scope": scope, "dim": dim,
                               "max_extent": 1024}
                              for prefix, scope in (("blockIdx", "grid"), ("threadIdx", "block"))
                              for dim, letter in enumerate("xyz")],
                     "max_threads_per_block": 1024, "subgroup_size": 32,
                     "shared_level": "shared", "barrier_scopes": ["block"]})
FPGA = _spec("toy_fpga", [("DRAM", None), ("BRAM", 1 << 20), ("register", 512)],
             ["split", "fuse", "reorder", "unroll", "inline", "compute_at", "buffer",
              "pipeline", "partition"], ["serial", "pipelined", "unrolled"])


def _statements(stmt: Stmt) -> list[Stmt]:
    found = [stmt]
    if isinstance(stmt, Seq):
        for part in stmt.stmts:
            found += _statements(part)
    elif isinstance(stmt, (For, Allocate)):
        found += _statements(stmt.body)
    elif hasattr(stmt, "then_body"):
        found += _statements(stmt.then_body)
    return found


def _matmul(m: int, n: int, k: int):
    rng = np.random.default_rng(m + n + k)
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    C = ops.matmul(A, B, name="C")
    inputs = {"A": rng.standard_normal((m, k)).astype(np.float32),
              "B": rng.standard_normal((k, n)).astype(np.float32)}
    return C, inputs


def test_gpu_blocks_threads_and_shared_tiles() -> None:
    C, inputs = _matmul(20, 12, 9)
    s = create_schedule(C, GPU)
    AS = s.cache_read(C.inputs[0], "shared")
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    bi, bj, ti, tj = s[C].tile(i, j, 8, 4)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(bi, bj, ti, tj, ko, ki)
    s[C].bind(bi, "blockIdx.y")
    s[C].bind(bj, "blockIdx.x")
    s[C].bind(ti, "threadIdx.y")
    s[C].bind(tj, "threadIdx.x")
    s[AS].compute_at(s[C], ko)
    s[C].unroll(ki)
    check_schedule(s, inputs)
    (kernel,) = s.lower()
    # the shared tile of A, (1, 4) float32, is the block's shared memory
    assert kernel.launch == LaunchConfig(grid=(3, 3), block=(4, 8), shared_bytes=16)
    bound = [(st.var.name, st.axis) for st in _statements(kernel.body)
             if isinstance(st, For) and st.kind is LoopKind.BOUND]
    assert bound == [("i_outer", "blockIdx.y"), ("j_outer", "blockIdx.x"),
                     ("i_inner", "threadIdx.y"), ("j_inner", "threadIdx.x")]
    (shared,) = [st.buffer for st in _statements(kernel.body) if isinstance(st, Allocate)]
    assert (shared.level, shared.shape) == ("shared", (1, 4))


def test_gpu_spec_rejects_cpu_loop_kinds_at_lowering() -> None:
    C, inputs = _matmul(4, 4, 4)
    s = create_schedule(C)
    s[C].parallel(s[C].axes[0])
    try:
        s.lower(GPU)
    except Exception as err:  # noqa: BLE001 - checked below
        assert "toy_gpu does not offer the parallel primitive" in str(err)
    else:  # pragma: no cover - the assertion documents the expectation
        raise AssertionError("parallel lowered for a target without it")


def test_fpga_read_compute_write_pipeline() -> None:
    C, inputs = _matmul(6, 10, 5)
    s = create_schedule(C, FPGA)
    A, B = C.inputs
    s[C].buffer("BRAM", tensors=[A, B, C])
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    s[C].reorder(i, k, j)
    s[C].pipeline(j, initiation_interval=1)
    s[C].partition(1, "cyclic", 5)
    check_schedule(s, inputs)
    (kernel,) = s.lower()
    copies = [st for st in _statements(kernel.body) if isinstance(st, Copy)]
    assert [(c.dst.buffer.name, c.src.buffer.name) for c in copies] == [
        ("A_BRAM", "A"), ("B_BRAM", "B"), ("C", "C_BRAM")]
    pipelined = [st for st in _statements(kernel.body)
                 if isinstance(st, For) and st.kind is LoopKind.PIPELINED]
    assert [(p.var.name, p.initiation_interval) for p in pipelined] == [("j", 1), ("j", 1)]
    (write,) = [st.buffer for st in _statements(kernel.body)
                if isinstance(st, Allocate) and st.buffer.name == "C_BRAM"]
    assert [(p.dim, p.kind.value, p.factor) for p in write.partitions] == [(1, "cyclic", 5)]


def test_fpga_line_buffer_with_compute_at_and_unrolled_window() -> None:
    rng = np.random.default_rng(9)
    x = te.placeholder((9, 8), name="x")
    pad = ops.pad(x, [(1, 1), (1, 1)], name="pad")
    blur = te.compute((9, 8), lambda h, w: (pad[h, w] + pad[h + 1, w + 1] + pad[h + 2, w + 2])
                      * (1.0 / 3.0), name="blur")
    s = create_schedule(blur, FPGA)
    h, w = s[blur].axes
    s[pad].compute_at(s[blur], h)
    s[pad].buffer("BRAM")
    s[pad].partition(0, "complete")
    s[blur].pipeline(w)
    (kernel,) = s.lower()
    (line,) = [st.buffer for st in _statements(kernel.body) if isinstance(st, Allocate)]
    assert (line.name, line.shape, line.level) == ("pad", (3, 10), "BRAM")
    check_schedule(s, {"x": rng.standard_normal((9, 8)).astype(np.float32)})


def test_loop_kinds_from_lowering_options_alone() -> None:
    C, inputs = _matmul(5, 6, 3)
    s = create_schedule(C)
    s[C].unroll(s[C].reduce_axes[0])
    options = LoweringOptions(loop_kinds={"serial", "unrolled"}, param_level="DRAM")
    check_schedule(s, inputs, options)
    assert s.lower(options)[0].params[0].level == "DRAM"
