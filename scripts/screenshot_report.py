"""Write the HTML report of a zoo network and look at it in a real headless browser: a
screenshot (PNG) through Chromium's ``--headless --screenshot``, and the page's DOM as the
browser built it (``--dump-dom``), checked for the graph, the kernel table and both plots.

    python scripts/screenshot_report.py [--network resnet18] [--out /tmp/report] [--browser PATH]

Chromium is found on PATH (``chromium``, ``chromium-browser``, ``google-chrome``) or given;
playwright's own browser download needs network access this script does not assume. Exits 0
when the page rendered and every part is in the browser's DOM, 1 otherwise, 2 without a
browser.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tilecraft.models as models
from tilecraft.html_report import build_report, write_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet18", choices=sorted(models.NETWORKS))
    parser.add_argument("--full", action="store_true", help="full size (default: small)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "report")
    parser.add_argument("--browser", default=None, help="a Chromium executable")
    parser.add_argument("--database", default=None, help="a tuning database")
    args = parser.parse_args(argv)
    browser = args.browser or next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        print("no headless browser found (chromium, google-chrome); give --browser PATH")
        return 2
    page = args.out / f"{args.network}.html"
    write_report(page, build_report(models.build(args.network, small=not args.full),
                                    "x86_avx512", database=args.database, runs=5,
                                    title=f"tilecraft report: {args.network}"))
    shot = args.out / f"{args.network}.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu",
              "--hide-scrollbars", f"--user-data-dir={args.out / 'profile'}"]
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1400,2400",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    checks = {"graph svg": "<svg" in dom and 'class="node"' in dom,
              "kernel table": 'id="kernels"' in dom,
              "roofline image": 'alt="roofline"' in dom,
              "screenshot written": shot.is_file() and shot.stat().st_size > 10_000}
    for name, ok in checks.items():
        print(f"{'ok ' if ok else 'BAD'} {name}")
    print(f"page {page} ({page.stat().st_size / 1e3:.0f} KB), screenshot {shot}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
