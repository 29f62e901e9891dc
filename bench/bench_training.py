"""Training on x86 (issue 18): backward graphs derived by tilecraft.autodiff and compiled with
the default schedules (no tuning) against PyTorch autograd, medians measured side by side in
one run at 1 and 2 PyTorch threads, ratio torch / tilecraft (> 1: tilecraft faster), results
compared (rtol = atol = 1e-3 relative to the largest value). At each thread count n tilecraft
is compiled for n threads (``TILECRAFT_X86_THREADS``) and timed back to back with PyTorch at n
intra-op threads:

1. conv2d backward, ResNet-18 layers: data and weight gradients (one program);
2. a BERT encoder layer's backward: input and all 16 weight gradients from an output gradient
   (the weights turned into inputs);
3. one training step of the small CNN (conv-bn-relu x2 + dense, cross-entropy, SGD): the one
   compiled Executable vs PyTorch forward + backward + update.

    python bench/bench_training.py [--small] [--threads N ...] [--only conv|bert|step]

``--small`` halves the conv images, uses BERT's 128-token layer at hidden 256 and a batch-8
CNN; without it BERT-base's 128-token layer (768 hidden, 12 heads, 3072 GELU) and a batch-32
CNN. On a shared machine whose load exceeds its cores, 2-thread timings of both sides swing
wildly (a parallel region waits for a descheduled thread); quote the load printed with them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_autodiff import LAYERS, cpu_name  # noqa: E402
from common import geomean, load_torch, median_seconds, print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import ops, te  # noqa: E402
from tilecraft.autodiff import grad, sgd_step  # noqa: E402
from tilecraft.autodiff.examples import small_cnn  # noqa: E402
from tilecraft.graph import Graph  # noqa: E402
from tilecraft.models.builder import TeBuilder  # noqa: E402
from tilecraft.models.transformer import EncoderConfig, build_encoder  # noqa: E402
from tilecraft.passes.rewriting import rebuild_graph  # noqa: E402

TARGET = "x86_avx512"


def close(ours: np.ndarray, theirs: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(theirs).max()))
    return bool(np.allclose(ours, theirs, rtol=1e-3, atol=1e-3 * scale))


def timed_compile(graph: Graph):
    started = time.perf_counter()
    exe = tc.compile(graph, TARGET)
    return exe, time.perf_counter() - started


def paired(threads: list[int], graph: Graph, arrays: dict, torch_run, ratios, repeat=15):
    """Per thread count n: tilecraft compiled for n threads (TILECRAFT_X86_THREADS) and
    PyTorch at n intra-op threads, timed back to back. Returns the row's cells, the compile
    time of the first and the first Executable's results."""
    cells, first = [], None
    for n in threads:
        os.environ["TILECRAFT_X86_THREADS"] = str(n)
        exe, compile_s = timed_compile(graph)
        if first is None:
            first = (compile_s, exe(**arrays))
        ours_s = median_seconds(lambda exe=exe: exe(**arrays), repeat=repeat)
        load_torch(n)
        theirs_s = median_seconds(torch_run, repeat=repeat)
        ratios[n].append(theirs_s / ours_s)
        cells += [f"{ours_s * 1e3:.2f}", f"{theirs_s * 1e3:.2f}", f"{theirs_s / ours_s:.2f}"]
    os.environ.pop("TILECRAFT_X86_THREADS", None)
    return cells, first[0], first[1]


def header_for(first: list[str], threads: list[int]) -> list[str]:
    header = list(first)
    for n in threads:
        header += [f"ours {n}t ms", f"torch {n}t ms", f"x{n}t"]
    return header + ["match"]


def bench_convs(args, threads) -> None:
    rows, ratios = [], {n: [] for n in threads}
    torch = load_torch(threads[0])
    for name, cin, size, cout, kernel, stride, padding in LAYERS:
        size = max(kernel, size // 2) if args.small else size
        x = te.placeholder((args.batch, cin, size, size), name="x")
        w = te.placeholder((cout, cin, kernel, kernel), name="w")
        out = ops.conv2d(x, w, stride=stride, padding=padding, name="out")
        program = Graph.from_outputs(grad(out, [x, w]))
        rng = np.random.default_rng(0)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32)
                  for t in program.inputs}
        xt = torch.tensor(arrays["x"], requires_grad=True)
        wt = torch.tensor(arrays["w"], requires_grad=True)
        yt = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding)
        gt = torch.tensor(arrays["grad_out"])

        def run(yt=yt, xt=xt, wt=wt, gt=gt):
            return torch.autograd.grad(yt, [xt, wt], gt, retain_graph=True)

        cells, compile_s, (dx, dw) = paired(threads, program, arrays, run, ratios)
        tx, tw = run()
        ok = close(dx, tx.numpy()) and close(dw, tw.numpy())
        rows.append([name, f"{args.batch}x{cin}x{size}x{size}", f"{compile_s:.1f}s", *cells,
                     "yes" if ok else "NO"])
    rows.append(["geomean", "", ""] + sum((["", "", f"{geomean(ratios[n]):.2f}"]
                                           for n in threads), []) + [""])
    print_table("conv2d backward (data + weight gradients), ResNet-18 layers",
                header_for(["layer", "input", "compile"], threads), rows)


def bert_layer(config: EncoderConfig):
    builder = TeBuilder(0)
    out = build_encoder(builder, config)
    graph = Graph.from_outputs([out])
    weights = {c: te.placeholder(c.shape, c.dtype, name=c.name) for c in graph.constants}
    values = {c.name: c.constant_value.astype(np.float32) for c in graph.constants}
    return rebuild_graph(graph, weights), values


def torch_bert(torch, x, p: dict, config: EncoderConfig):
    F = torch.nn.functional
    tokens, hidden, heads = config.tokens, config.hidden, config.heads
    d = hidden // heads

    def heads_of(t):
        return t.reshape(tokens, heads, d).transpose(0, 1)

    q = heads_of(F.linear(x, p["layer_attn_q_w"], p["layer_attn_q_b"]))
    k = heads_of(F.linear(x, p["layer_attn_k_w"], p["layer_attn_k_b"]))
    v = heads_of(F.linear(x, p["layer_attn_v_w"], p["layer_attn_v_b"]))
    probs = torch.softmax(q @ k.transpose(1, 2) / d ** 0.5, dim=-1)
    merged = (probs @ v).transpose(0, 1).reshape(tokens, hidden)
    attended = F.linear(merged, p["layer_attn_out_w"], p["layer_attn_out_b"])
    h = F.layer_norm(x + attended, (hidden,), p["layer_ln1_gamma"], p["layer_ln1_beta"],
                     config.eps)
    up = F.gelu(F.linear(h, p["layer_ffn_up_w"], p["layer_ffn_up_b"]))
    down = F.linear(up, p["layer_ffn_down_w"], p["layer_ffn_down_b"])
    return F.layer_norm(h + down, (hidden,), p["layer_ln2_gamma"], p["layer_ln2_beta"],
                        config.eps)


def bench_bert(args, threads) -> None:
    config = (EncoderConfig(tokens=128, hidden=256, heads=4, ffn=1024, activation="gelu",
                            eps=1e-12) if args.small else
              EncoderConfig(tokens=128, hidden=768, heads=12, ffn=3072, activation="gelu",
                            eps=1e-12))
    graph, weights = bert_layer(config)
    (out,) = graph.outputs
    wrt = list(graph.inputs)  # x and the weights
    program = Graph.from_outputs(grad(out, wrt))
    rng = np.random.default_rng(0)
    values = {**weights, "x": rng.standard_normal((config.tokens, config.hidden))
              .astype(np.float32),
              f"grad_{out.name}": rng.standard_normal(out.shape).astype(np.float32)}
    arrays = {t.name: values[t.name] for t in program.inputs}
    torch = load_torch(threads[0])
    leaves = {t.name: torch.tensor(values[t.name], requires_grad=True) for t in wrt}
    yt = torch_bert(torch, leaves["x"], leaves, config)
    gt = torch.tensor(arrays[f"grad_{out.name}"])

    def run():
        return torch.autograd.grad(yt, list(leaves.values()), gt, retain_graph=True)

    ratios = {n: [] for n in threads}
    cells, compile_s, ours = paired(threads, program, arrays, run, ratios, repeat=7)
    ok = all(close(a, b.numpy()) for a, b in zip(ours, run()))
    row = [f"{config.tokens}x{config.hidden}, {config.heads} heads, ffn {config.ffn}",
           str(len(program.computes)), f"{compile_s:.1f}s", *cells, "yes" if ok else "NO"]
    print_table("BERT encoder layer backward (input + 16 weight gradients)",
                header_for(["BERT layer", "computes", "compile"], threads), [row])


def bench_step(args, threads) -> None:
    batch, image, channels = (8, 16, (3, 16, 32)) if args.small else (32, 32, (3, 32, 64))
    model = small_cnn(batch=batch, image=image, channels=channels, classes=10)
    lr = 0.05
    step = sgd_step(model.graph, model.loss, model.params, lr=lr)
    arrays = {**model.init(0), **model.batch(0)}
    torch = load_torch(threads[0])
    F = torch.nn.functional
    names = [p.name for p in model.params]
    x = torch.tensor(arrays["x"])
    labels = torch.tensor(arrays["onehot"]).argmax(1)

    def run():
        p = {n: torch.tensor(arrays[n], requires_grad=True) for n in names}
        h = x
        for i, stride in ((1, 1), (2, 2)):
            h = F.conv2d(h, p[f"w{i}"], stride=stride, padding=1)
            h = F.relu(F.batch_norm(h, None, None, p[f"gamma{i}"], p[f"beta{i}"],
                                    training=True))
        loss = F.cross_entropy(F.linear(h.flatten(1), p["wd"], p["bd"]), labels)
        loss.backward()
        with torch.no_grad():
            return [loss] + [p[n] - lr * p[n].grad for n in names]

    ratios = {n: [] for n in threads}
    cells, compile_s, ours = paired(threads, step.graph, arrays, run, ratios, repeat=9)
    ok = all(close(a, b.detach().numpy()) for a, b in zip(ours, run()))
    row = [f"batch {batch}, {image}x{image}, channels {channels}", str(len(step.graph.computes)),
           f"{compile_s:.1f}s", *cells, "yes" if ok else "NO"]
    print_table("one training step (forward + backward + SGD, one Executable)",
                header_for(["small CNN step", "computes", "compile"], threads), [row])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=1, help="conv batch (default 1)")
    parser.add_argument("--only", choices=["conv", "bert", "step"], nargs="+")
    args = parser.parse_args()
    if load_torch(1) is None:
        sys.exit("bench_training compares against PyTorch: install the torch extra")
    parts = args.only or ["conv", "bert", "step"]
    load = os.getloadavg()[0]
    print(f"# {cpu_name()}, {os.cpu_count()} cores, load average {load:.1f} at the start")
    for part, fn in (("conv", bench_convs), ("bert", bench_bert), ("step", bench_step)):
        if part in parts:
            fn(args, args.threads)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
