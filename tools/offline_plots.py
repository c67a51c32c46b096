"""Render the pipeline's DVC plots as an HTML page that needs no network.

`dvc plots show` loads vega, vega-lite and vega-embed from a CDN, so its page is blank on
an offline machine. This script builds an HTML template with those libraries inlined (the
bundle shipped by the pinned PyPI package vl-convert-python) and passes it to
`dvc plots show --html-template`. Usage (from the repository root):

    python tools/offline_plots.py            # writes dvc_plots/index.html
    python tools/offline_plots.py -- --json  # anything after -- goes to dvc plots show
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import vl_convert

TEMPLATE = Path(".dvc/tmp/offline_plots_template.html")


def template_html() -> str:
    """A dvc-render page template (``{plot_divs}`` placeholder) with the chart libraries
    inlined; ``{scripts}`` (the CDN tags) is left out on purpose."""
    # The bundle assigns window.vegaEmbed; wrapping it keeps its top-level names out of the
    # page's global scope, where DVC's per-plot scripts declare `var spec`.
    bundle = vl_convert.javascript_bundle().replace("</script", "<\\/script")
    return ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>seqcore plots</title>\n<script>(function () {\n" + bundle +
            "\n})();</script>\n<style>body { font-family: sans-serif; }</style>\n</head>\n"
            "<body>\n{plot_divs}\n</body>\n</html>\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", default="dvc_plots", help="output folder (%(default)s)")
    parser.add_argument("extra", nargs="*", help="more `dvc plots show` arguments (after --)")
    args = parser.parse_args()
    TEMPLATE.parent.mkdir(parents=True, exist_ok=True)
    TEMPLATE.write_text(template_html(), encoding="utf-8")
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    sys.exit(subprocess.run([dvc, "plots", "show", "--html-template", str(TEMPLATE),
                             "-o", args.out, *args.extra], check=False).returncode)


if __name__ == "__main__":
    main()
