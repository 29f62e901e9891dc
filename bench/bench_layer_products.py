"""How far a speed-up over onnxruntime can go on a layer: its matrix products alone against the
whole layer, in onnxruntime and in tilecraft, side by side in one run.

``bench_networks.py`` says which rate a goal (1.2x onnxruntime) needs against the FMA ceiling.
This script splits the layer instead. From the network's ONNX export it keeps only the
``MatMul``/``Gemm`` nodes. Each of them reads its operands as they are in the layer: weights
stay initializers, activations become graph inputs of their inferred shapes. Both runtimes
then run that products-only model and the whole layer:

- ``onnxruntime products``, ``onnxruntime layer``: the layer minus its products is what
  onnxruntime spends on everything else (normalisations, softmax, GELU, reshapes);
- ``tilecraft products`` (the same products model through ``tc.from_onnx``), ``tilecraft
  layer``; on a CPU with AMX the products with constant weights run on its tiles
  (:mod:`tilecraft_x86_avx512.blocking.amx_split`), which pass the float32 FMA ceiling the
  percentages are of;
- ``torch products`` (``torch.matmul``, MKL on x86, weights as plain tensors), where torch is
  installed: the best library's rate on the same shapes.

The closing lines print the rate a ``goal``-times speed-up needs: the whole layer in
``onnxruntime layer / goal``, as GFLOP/s of the layer's products and as a share of the measured
FMA ceiling, next to the rates tilecraft's layer and its products alone reach. tilecraft's
products alone can take longer than its layer: unfused, the attention's scores are written to
memory and read back (12 x 512 x 512 floats for BERT), which the layer's fused chain never does.
Every runner is timed in alternated rounds and the medians are quoted. The machine drifts, so
ratios within one run are what to compare.

    python bench/bench_layer_products.py [--threads 1,2] [--rounds 9] [--goal 1.2] [NAME ...]

NAME defaults to bert_base (also transformer_small/base/large, vit_base).
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    alternated,
    amx_note,
    ceiling_note,
    measured_ceiling_flops,
    print_table,
)

import tilecraft as tc  # noqa: E402
import tilecraft.models as models  # noqa: E402

PRODUCT_OPS = ("MatMul", "Gemm")


def products_model(model: Any) -> tuple[Any, dict[str, tuple[int, ...]], float]:
    """The ``MatMul``/``Gemm`` nodes of ``model`` alone, their non-constant operands as graph
    inputs (shapes from ONNX shape inference), every product an output; with those inputs'
    shapes and the products' FLOPs (``2 M N K`` per product, batched products times their
    batch)."""
    import onnx
    from onnx import TensorProto, helper

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    shapes = {info.name: tuple(d.dim_value for d in info.type.tensor_type.shape.dim)
              for info in (*graph.input, *graph.value_info, *graph.output)}
    initializers = {init.name: init for init in graph.initializer}
    shapes.update({name: tuple(init.dims) for name, init in initializers.items()})
    nodes = [node for node in graph.node if node.op_type in PRODUCT_OPS]
    produced = {name for node in nodes for name in node.output}
    inputs: dict[str, tuple[int, ...]] = {}
    used: dict[str, Any] = {}
    flops = 0.0
    for node in nodes:
        for operand in node.input:
            if not operand:
                continue
            if operand in initializers:
                used[operand] = initializers[operand]
            elif operand not in produced:  # one product feeding another stays inside
                inputs[operand] = shapes[operand]
        a, out = shapes[node.input[0]], shapes[node.output[0]]
        k = a[-1] if not (node.op_type == "Gemm" and _attribute(node, "transA")) else a[-2]
        flops += 2.0 * float(np.prod(out)) * k
    value = lambda name, shape: helper.make_tensor_value_info(  # noqa: E731
        name, TensorProto.FLOAT, list(shape))
    products = helper.make_graph(
        nodes, f"{graph.name}_products", [value(n, s) for n, s in inputs.items()],
        [value(node.output[0], shapes[node.output[0]]) for node in nodes], list(used.values()))
    return (helper.make_model(products, opset_imports=list(model.opset_import)), inputs, flops)


def _attribute(node: Any, name: str) -> int:
    return next((attr.i for attr in node.attribute if attr.name == name), 0)


def _torch_products(model: Any, feeds: dict[str, np.ndarray], threads: int
                    ) -> Callable[[], Any] | None:
    """``torch.matmul`` over the products model's MatMul nodes (None without torch, or where a
    node is a Gemm)."""
    try:
        import torch
        from onnx import numpy_helper
    except ImportError:
        return None
    torch.set_num_threads(threads)
    if any(node.op_type != "MatMul" for node in model.graph.node):
        return None
    tensors = {name: torch.from_numpy(array) for name, array in feeds.items()}
    tensors.update({init.name: torch.from_numpy(numpy_helper.to_array(init).copy())
                    for init in model.graph.initializer})
    pairs = [(tensors[node.input[0]], tensors[node.input[1]]) for node in model.graph.node]
    return lambda: [torch.matmul(a, b) for a, b in pairs]


def measure(name: str, threads: int, rounds: int) -> tuple[dict[str, float], float]:
    import onnxruntime as ort
    from tilecraft_x86_avx512.target import X86Avx512Target

    model = models.to_onnx(name)
    products, inputs, flops = products_model(model)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    graph = models.build(name)
    x = rng.standard_normal(graph.inputs[0].shape).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = lambda m: ort.InferenceSession(  # noqa: E731
        m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ort_products, ort_layer = session(products), session(model)
    target = X86Avx512Target(threads=threads)
    ours_products = tc.compile(tc.from_onnx(products), target=target)
    ours_layer = tc.compile(graph, target=target)
    runs = [("onnxruntime products", lambda: ort_products.run(None, feeds)),
            ("onnxruntime layer", lambda: ort_layer.run(None, {"x": x})),
            ("tilecraft products", lambda: ours_products(**feeds)),
            ("tilecraft layer", lambda: ours_layer(x))]
    torch_run = _torch_products(products, feeds, threads)
    if torch_run is not None:
        runs.append(("torch products", torch_run))
    return alternated(runs, rounds), flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", default=["bert_base"])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--goal", type=float, default=1.2)
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    from tilecraft_x86_avx512.host import host_info

    print(f"# bench_layer_products.py, {host_info().model_name} ({platform.machine()}); "
          f"{ceiling_note(max(thread_counts))}")
    note = amx_note()   # builds the host's spec: once
    if note:
        print(f"# {note}")
    for name in args.names:
        for threads in thread_counts:
            seconds, flops = measure(name, threads, args.rounds)
            ceiling, _ = measured_ceiling_flops(threads)
            rows = [[label, f"{s * 1e3:.2f}", f"{flops / s / 1e9:.1f}",
                     f"{flops / s / ceiling * 100:.0f}%"] for label, s in seconds.items()]
            print_table(f"{name}, {threads} thread(s): {flops / 1e9:.2f} GFLOP of products",
                        ["runner", "ms", "GFLOP/s of the products", "% of the ceiling"], rows)
            ort_layer, ort_products = seconds["onnxruntime layer"], seconds["onnxruntime products"]
            our_layer, our_products = seconds["tilecraft layer"], seconds["tilecraft products"]
            needed = ort_layer / args.goal
            rate = lambda t: f"{flops / t / 1e9:.0f} GFLOP/s ({flops / t / ceiling:.0%})"  # noqa: E731
            print(f"speed-up over onnxruntime: {ort_layer / our_layer:.3f}x (products alone: "
                  f"{ort_products / our_products:.3f}x); onnxruntime spends "
                  f"{(ort_layer - ort_products) * 1e3:.2f} ms outside its products")
            print(f"{args.goal:g}x onnxruntime needs the layer in {needed * 1e3:.2f} ms: "
                  f"{rate(needed)} of products; tilecraft's layer runs at {rate(our_layer)}, "
                  f"its products alone at {rate(our_products)}")

if __name__ == "__main__":
    main()
