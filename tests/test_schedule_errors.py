"""Invalid schedules raise a ScheduleError naming the primitive, the stage and the loop, and
what to do instead."""

from __future__ import annotations

import pytest

from tilecraft import ops, te
from tilecraft.errors import LoweringError, TilecraftError
from tilecraft.lower import LoweringOptions
from tilecraft.schedule import ScheduleError, apply_config, create_schedule, replay
from tilecraft.target.spec import load_spec


def _spec(name: str, primitives: list[str], loop_kinds: list[str],
          fixed: dict | None = None) -> object:
    return load_spec({
        "name": name, "api_version": 1, "version": "0",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8,
             "kind": "dram"},
            {"name": "SRAM", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 64}]},
        "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 256},
        "primitives": primitives, "loop_kinds": loop_kinds,
        "fixed_decisions": fixed or {},
        "evaluation": "estimate", "capabilities": {"models_performance": True}})


CPU = _spec("cpu", ["split", "fuse", "reorder", "tile", "unroll", "vectorize", "inline",
                    "compute_at", "parallel", "cache"],
            ["serial", "parallel", "vector", "unrolled"])
NO_VECTOR_REDUCTION = _spec("dsp", ["split", "reorder", "vectorize"], ["serial", "vector"],
                            {"vector_reduction": False})
SPLIT_ONLY = _spec("tiny", ["split"], ["serial"])


def _matmul(m: int = 8, n: int = 6, k: int = 5):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    return ops.matmul(A, B, name="C")


def _chain():
    A = te.placeholder((6, 10), name="A")
    B = te.compute((6, 10), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 10), lambda i, j: B[i, j] + 1.0, name="C")
    return A, B, C


def _raises(*words: str):
    """pytest.raises(ScheduleError) whose message contains every one of ``words``."""
    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(ScheduleError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            message = str(self.info.value)
            for word in words:
                assert word in message, f"{word!r} not in {message!r}"
            return handled

    return _Check()


def test_schedule_error_is_a_lowering_error() -> None:
    assert issubclass(ScheduleError, LoweringError)
    assert issubclass(ScheduleError, TilecraftError)


# split -------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor", [0, -3])
def test_split_by_zero_or_less(factor: int) -> None:
    C = _matmul()
    s = create_schedule(C)
    with _raises("split", "stage C", "loop i", f"factor {factor}", "at least 1"):
        s[C].split(s[C].axes[0], factor=factor)


def test_split_needs_exactly_one_of_factor_and_nparts() -> None:
    C = _matmul()
    s = create_schedule(C)
    with _raises("split", "loop i", "exactly one of factor"):
        s[C].split(s[C].axes[0])
    with _raises("split", "loop j", "exactly one of factor"):
        s[C].split(s[C].axes[1], factor=2, nparts=2)
    with _raises("split", "nparts 0"):
        s[C].split(s[C].axes[1], nparts=0)
    with _raises("split", "factor must be an int"):
        s[C].split(s[C].axes[1], factor=2.5)


def test_split_of_a_replaced_or_annotated_loop() -> None:
    C = _matmul()
    s = create_schedule(C)
    i, j = s[C].axes
    s[C].split(i, factor=2)
    with _raises("split", "loop i", "already replaced", "split into i.outer and i.inner"):
        s[C].split(i, factor=2)
    s[C].vectorize(j)
    with _raises("split", "loop j", "already vector"):
        s[C].split(j, factor=2)
    with _raises("split", "already has a loop named 'i.outer'"):
        s[C].split(s[C].reduce_axes[0], factor=2, names=("i.outer", "k.in"))


def test_loops_of_another_stage_or_unknown_names() -> None:
    A, B, C = _chain()
    s = create_schedule(C)
    with _raises("reorder", "stage C", "loop i", "belongs to stage B", "different nests"):
        s[C].reorder(s[B].axes[0], s[C].axes[1])
    with _raises("split", "stage C", "no loop named 'q'"):
        s[C].split("q", factor=2)
    with _raises("fuse", "not a loop"):
        s[C].fuse(3, 4)


# fuse / reorder -------------------------------------------------------------------------
def test_fuse_needs_adjacent_loops_of_one_kind() -> None:
    C = _matmul()
    s = create_schedule(C)
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    with _raises("fuse", "stage C", "not adjacent", "reorder them next to each other"):
        s[C].fuse(j, i)
    with _raises("fuse", "cannot fuse spatial and reduce"):
        s[C].fuse(j, k)
    with _raises("fuse", "at least two"):
        s[C].fuse(i)


def test_reorder_names_each_loop_once() -> None:
    C = _matmul()
    s = create_schedule(C)
    i, j = s[C].axes
    with _raises("reorder", "loop i", "named twice"):
        s[C].reorder(i, j, i)


# annotations ----------------------------------------------------------------------------
def test_vectorising_a_reduction_the_target_cannot() -> None:
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis(32, name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = create_schedule(S, NO_VECTOR_REDUCTION)
    with _raises("vectorize", "stage S", "loop k", "reduction", "vector_reduction: false"):
        s[S].vectorize(s[S].reduce_axes[0])
    s[S].vectorize(s[S].axes[0])  # a spatial loop is fine
    free = create_schedule(S)
    free[S].vectorize(free[S].reduce_axes[0])
    with _raises("vectorize", "loop k", "vector_reduction"):
        free.lower(NO_VECTOR_REDUCTION)
    single_lane = LoweringOptions(vector_lanes=1)
    with _raises("vectorize", "loop k", "single lane"):
        free.lower(single_lane)


def test_vector_loop_must_be_innermost() -> None:
    C = _matmul()
    s = create_schedule(C)
    s[C].vectorize(s[C].axes[1])
    with _raises("vectorize", "stage C", "loop j", "innermost", "loop k runs inside"):
        s.lower()


def test_parallel_reduction_and_misplaced_parallel_loops() -> None:
    C = _matmul()
    s = create_schedule(C)
    with _raises("parallel", "stage C", "loop k", "race"):
        s[C].parallel(s[C].reduce_axes[0])
    s[C].parallel(s[C].axes[1])
    with _raises("parallel", "stage C", "loop j", "outermost statement", "inside loop i"):
        s.lower()
    A, B, Cc = _chain()
    s = create_schedule(Cc)
    s[B].compute_at(s[Cc], s[Cc].axes[0])
    s[B].parallel(s[B].axes[1])
    with _raises("parallel", "stage B", "loop j", "inside loop i"):
        s.lower()
    s = create_schedule(Cc)
    s.cache_read(B, "global")
    s[Cc].parallel(s[Cc].axes[0])
    with _raises("parallel", "stage C", "after other statements"):
        s.lower()


def test_binding_on_a_target_without_threads() -> None:
    C = _matmul()
    s = create_schedule(C, CPU)
    with _raises("bind", "stage C", "loop i", "does not offer the bind primitive"):
        s[C].bind(s[C].axes[0], "blockIdx.x")
    free = create_schedule(C)
    free[C].bind(free[C].axes[0], "blockIdx.x")
    with _raises("bind", "stage C", "loop i"):
        free.lower(CPU)
    with _raises("bind", "cannot express bound loops", "no hardware threads"):
        free.lower(LoweringOptions(loop_kinds={"serial", "vector"}))
    with _raises("bind", "loop k", "cross-thread reduction", "power of two"):
        free[C].bind(free[C].reduce_axes[0], "threadIdx.x")
    with _raises("bind", "loop j", "hardware axis"):
        free[C].bind(free[C].axes[1], "")


def test_pipeline_and_unroll_arguments() -> None:
    C = _matmul()
    s = create_schedule(C)
    with _raises("pipeline", "loop i", "initiation_interval 0"):
        s[C].pipeline(s[C].axes[0], initiation_interval=0)
    with _raises("unroll", "loop j", "factor -1"):
        s[C].unroll(s[C].axes[1], factor=-1)
    with _raises("vectorize", "loop j", "lanes 0"):
        s[C].vectorize(s[C].axes[1], lanes=0)
    cpu = create_schedule(C, CPU)
    with _raises("pipeline", "does not offer the pipeline primitive"):
        cpu[C].pipeline(cpu[C].axes[0])


def test_primitive_the_target_does_not_offer() -> None:
    C = _matmul()
    s = create_schedule(C, SPLIT_ONLY)
    s[C].split(s[C].axes[0], factor=2)
    for call in (lambda: s[C].fuse(*s[C].leaf_loops[:2]),
                 lambda: s[C].reorder(s[C].axes[1], s[C].leaf_loops[0]),
                 lambda: s[C].tile(s[C].axes[1], s[C].reduce_axes[0], 2, 2),
                 lambda: s[C].unroll(s[C].axes[1]),
                 lambda: s.cache_write(C, "SRAM")):
        with _raises("does not offer", "it offers split"):
            call()
    free = create_schedule(C)
    free[C].unroll(free[C].axes[1])
    with _raises("unroll", "stage C", "loop j", "tiny does not offer the unroll primitive"):
        free.lower(SPLIT_ONLY)


# compute_inline / compute_at -----------------------------------------------------------
def test_inline_needs_an_elementwise_non_output_stage() -> None:
    C = _matmul()
    R = ops.relu(C, name="R")
    s = create_schedule(R)
    with _raises("compute_inline", "stage C", "loop k", "reduction"):
        s[C].compute_inline()
    with _raises("compute_inline", "stage R", "output of the program"):
        s[R].compute_inline()


def test_compute_at_misuse() -> None:
    A, B, C = _chain()
    D = te.compute((6, 10), lambda i, j: A[i, j] - 1.0, name="D")
    s = create_schedule([C, D])
    with _raises("compute_at", "stage B", "loop i", "does not read B"):
        s[B].compute_at(s[D], s[D].axes[0])
    with _raises("compute_at", "stage C", "output of the program"):
        s[C].compute_at(s[D], s[D].axes[0])
    with _raises("compute_at", "stage B", "its own loops"):
        s[B].compute_at(s[B], s[B].axes[0])
    with _raises("compute_at", "not a stage"):
        s[B].compute_at("nowhere", "i")
    s[B].compute_at(s[C], s[C].axes[0])
    s[C].split(s[C].axes[0], factor=2)
    with _raises("compute_at", "stage B", "loop i", "transformed afterwards", "i.outer"):
        s.lower()


def test_compute_at_cycle_and_outside_readers() -> None:
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((5,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((5,), lambda i: C[i] + B[i], name="D")
    s = create_schedule(D)
    s[C].compute_at(s[D], s[D].axes[0])
    with _raises("compute_at", "stage B", "also read by D", "outside that point"):
        s[B].compute_at(s[C], s[C].axes[0])
        s.lower()
    s = create_schedule(D)
    s[B].compute_at(s[C], s[C].axes[0])
    with _raises("compute_at", "stage C", "stage B does not read C"):
        s[C].compute_at(s[B], s[B].axes[0])
    s = create_schedule(D)
    s[B].compute_at(s[C], s[C].axes[0])
    s[C].compute_inline()
    with _raises("compute_at", "stage B", "inlined"):
        s.lower()


# cache / buffer / partition ------------------------------------------------------------
def test_cache_read_misuse() -> None:
    A, B, C = _chain()
    s = create_schedule(C, CPU)
    with _raises("cache_read", "'L7' is not a memory level of cpu", "DRAM, SRAM"):
        s.cache_read(A, "L7")
    with _raises("cache_read", "stage C", "does not read A"):
        s.cache_read(A, "SRAM", readers=[C])
    with _raises("cache_read", "not a tensor"):
        s.cache_read("Z", "SRAM")
    D = te.compute((6, 10), lambda i, j: A[i, j] + B[i, j], name="D")
    s = create_schedule(D)
    with _raises("cache_read", "A is read by B, D", "once per reader"):
        s.cache_read(A, "SRAM")


def test_cache_write_after_other_primitives() -> None:
    C = _matmul()
    s = create_schedule(C)
    s[C].split(s[C].axes[0], factor=2)
    with _raises("cache_write", "stage C", "call cache_write first"):
        s.cache_write(C, "SRAM")
    s = create_schedule(C)
    (k,) = s[C].reduce_axes
    s.cache_write(C, "SRAM")
    with _raises("split", "stage C", "loop k", "no longer a loop of stage C"):
        s[C].split(k, factor=2)


def test_buffer_and_partition_misuse() -> None:
    A, B, C = _chain()
    s = create_schedule(C)
    with _raises("buffer", "stage C", "does not read 'A'"):
        s[C].buffer("BRAM", tensors=[A])
    with _raises("buffer", "not a tensor"):
        s[C].buffer("BRAM", tensors=[3.5])
    with _raises("partition", "stage C", "dimension 2"):
        s[C].partition(2, "cyclic", 2)
    with _raises("partition", "unknown partition kind 'diagonal'"):
        s[C].partition(0, "diagonal", 2)
    with _raises("partition", "factor 0"):
        s[C].partition(0, "block", 0)
    cpu = create_schedule(C, CPU)
    with _raises("buffer", "does not offer the buffer primitive"):
        cpu[C].buffer("SRAM")
    with _raises("partition", "does not offer the partition primitive"):
        cpu[C].partition(0)


def test_partition_needs_an_on_chip_buffer() -> None:
    A, B, C = _chain()
    s = create_schedule(C)
    s[C].partition(0, "cyclic", 2)
    with _raises("partition", "stage C", "no on-chip buffer"):
        s.lower()


# lookups, config, replay ---------------------------------------------------------------
def test_stage_lookup() -> None:
    A, B, C = _chain()
    s = create_schedule(C)
    with _raises("input of the program", "cache_read"):
        s[A]
    with _raises("not a stage", "B, C"):
        s["Q"]
    with pytest.raises(ScheduleError, match="needs a Graph"):
        create_schedule(42)


@pytest.mark.parametrize(("config", "words"), [
    ({"tile": 3}, ["apply_config", "unknown key(s) 'tile'"]),
    ({"split": {"q": [2]}}, ["no axis 'q'"]),
    ({"split": {"i": [2, 2]}}, ["loop i", "multiply to 4, less than the extent 8"]),
    ({"split": {"i": [0, 8]}}, ["ints >= 1"]),
    ({"split": {"i": [2, 4]}, "reorder": ["i.0", "j.0", "k.0"]}, ["missing: i.1"]),
    ({"reorder": ["i.0", "j.0", "k.0", "k.0"]}, ["unknown or repeated: none", "every split"]),
    ({"fuse_parallel": 9}, ["exceeds the 3 loops"]),
    ({"fuse_parallel": -1}, ["fuse_parallel must be an int >= 0"]),
    ({"vectorize": "yes"}, ["vectorize must be true or false"]),
    ({"reorder": ["k.0", "i.0", "j.0"], "fuse_parallel": 1}, ["parallel", "loop k", "race"]),
    ({"reorder": ["i.0", "k.0", "j.0"], "fuse_parallel": 2, "cache_write": "SRAM"},
     ["reaches past the cache stage's attach point"]),
    ({"split": {"i": [2, 4]}, "reorder": ["i.1", "j.0", "k.0", "i.0"], "cache_write": "SRAM"},
     ["outer levels of each axis"]),
])
def test_apply_config_errors(config: dict, words: list[str]) -> None:
    C = _matmul()
    s = create_schedule(C)
    with _raises(*words):
        apply_config(s, C, config)


def test_replay_errors_name_the_step() -> None:
    C = _matmul()
    s = create_schedule(C)
    s[C].split(s[C].axes[0], factor=4)
    with _raises("replaying step 0", "'primitive': 'explode'", "unknown primitive"):
        replay(C, [{"primitive": "explode", "stage": "C"}])
    with _raises("replaying step 1", "already replaced"):
        replay(C, s.trace + s.trace)
    with _raises("replaying step 0", "not a trace step"):
        replay(C, ["split"])
    other = te.compute((8, 6), lambda i, j: te.placeholder((8, 6), name="X")[i, j], name="C")
    with _raises("replaying step 0", "cache_write made 'C_SRAM'", "'C_L1'"):
        replay(other, [{"primitive": "cache_write", "tensor": "C", "level": "SRAM",
                        "result": "C_L1"}])


def test_duplicate_axis_names_are_refused() -> None:
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="i")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    with _raises("create_schedule", "stage S", "named 'i'"):
        create_schedule(S)
