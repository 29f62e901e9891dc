"""torch.compile(backend="tilecraft") against eager PyTorch and torch.compile's inductor on
this CPU, side by side in one run: a BERT-like encoder block, a small CNN and a narrow
ResNet-18 (the models of tests/test_torch_backend.py), inference (torch.no_grad), medians,
compile times, and whether the outputs match eager (rtol = atol = 1e-3). tilecraft runs
twice: with the module's parameters and buffers frozen as constants (the backend's default:
batch norm folded, weights packed once at load) and with them as inputs read at every call
(``TILECRAFT_TORCH_FREEZE=0``, how the backend worked before). tilecraft's kernels use as
many threads as torch (``--threads``) unless ``TILECRAFT_X86_THREADS`` says otherwise.

    python bench/bench_torch_backend.py [--threads N] [--no-inductor]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import geomean, median_seconds, print_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--no-inductor", action="store_true", help="leave inductor out")
    args = parser.parse_args(argv)
    import torch
    from test_torch_backend import Attention, _cnn, resnet18_small

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TILECRAFT_X86_THREADS", str(args.threads))
    cases = {"bert-like block (7x36)": (Attention, (2, 7, 36)),
             "bert-like block (128x256)": (lambda: Attention(256, 4), (1, 128, 256)),
             "small cnn (13x11)": (_cnn, (1, 3, 13, 11)),
             "narrow resnet-18 (64x64)": (resnet18_small, (1, 3, 64, 64))}
    rows, ratios = [], []
    for name, (build, shape) in cases.items():
        torch.manual_seed(0)
        model = build().eval()
        x = torch.randn(*shape)
        with torch.no_grad():
            expected = model(x)
            eager = median_seconds(lambda: model(x), repeat=9, min_seconds=0.3)
            timed = {}
            for freeze in ("0", "1"):
                os.environ["TILECRAFT_TORCH_FREEZE"] = freeze
                torch._dynamo.reset()
                started = time.perf_counter()
                ours = torch.compile(model, backend="tilecraft")
                match = torch.allclose(ours(x), expected, rtol=1e-3, atol=1e-3)
                compile_s = time.perf_counter() - started
                timed[freeze] = (median_seconds(lambda: ours(x), repeat=9, min_seconds=0.3),
                                 compile_s, match)
            os.environ.pop("TILECRAFT_TORCH_FREEZE")
            (inputs_s, inputs_compile, inputs_match) = timed["0"]
            (ours_s, compile_s, match) = timed["1"]
            match = match and inputs_match
            inductor = None
            if not args.no_inductor:
                torch._dynamo.reset()
                compiled = torch.compile(model)
                compiled(x)
                inductor = median_seconds(lambda: compiled(x), repeat=9, min_seconds=0.3)
        ratios.append(eager / ours_s)
        rows.append([name, f"{inputs_compile:.1f} / {compile_s:.1f}",
                     f"{inputs_s * 1e3:.3f}", f"{ours_s * 1e3:.3f}",
                     f"{inputs_s / ours_s:.2f}", f"{eager * 1e3:.3f}",
                     "-" if inductor is None else f"{inductor * 1e3:.3f}",
                     f"{eager / ours_s:.2f}",
                     "-" if inductor is None else f"{inductor / ours_s:.2f}",
                     "yes" if match else "NO"])
    print_table(f"torch.compile backends, {platform.processor() or platform.machine()}, "
                f"torch {args.threads} thread(s), tilecraft "
                f"{os.environ['TILECRAFT_X86_THREADS']} thread(s)",
                ["model", "compile s (inputs / frozen)", "tilecraft weights-inputs ms",
                 "tilecraft frozen ms", "frozen speed-up", "eager ms", "inductor ms",
                 "frozen vs eager", "frozen vs inductor", "match"], rows)
    print(f"geomean speed-up of frozen tilecraft over eager: {geomean(ratios):.2f}")
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
