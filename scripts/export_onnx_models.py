"""Export the model zoo (tilecraft.models) to ONNX files with the onnx helper API: seeded random
weights, no downloads, no torch. Each file is checked by onnx's checker.

    python scripts/export_onnx_models.py OUT_DIR [--small] [--seed N] [NAME ...]

writes OUT_DIR/<name>[_small].onnx for each named network (all of them by default).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

import tilecraft.models as models


def export(name: str, out_dir: Path, small: bool, seed: int) -> Path:
    """Write network ``name`` to ``out_dir`` and return the file's path."""
    model = models.to_onnx(name, small=small, seed=seed)
    onnx.checker.check_model(model)
    path = out_dir / f"{name}{'_small' if small else ''}.onnx"
    # the largest (ResNet-50, ~100 MB of weights) fit under protobuf's 2 GB limit
    path.write_bytes(model.SerializeToString())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("names", nargs="*", help=f"networks (default all: "
                                                 f"{', '.join(models.NETWORKS)})")
    parser.add_argument("--small", action="store_true", help="the small test configurations")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_intermixed_args(argv)
    unknown = [n for n in args.names if n not in models.NETWORKS]
    if unknown:
        parser.error(f"unknown network(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(models.NETWORKS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(models.NETWORKS):
        path = export(name, args.out_dir, args.small, args.seed)
        print(f"{path}  ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
