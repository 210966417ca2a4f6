"""A plots page that renders offline: ``python -m paperworks.core.plots_page [show|diff REV…]``.

DVC's own page (``dvc plots show``) loads Vega, Vega-Lite and Vega-Embed from a CDN, so its
charts are blank without internet. DVC takes an HTML template (``--html-template``); this one
inlines the Vega-Embed bundle that the ``vl-convert-python`` wheel ships (built by its authors
from the same libraries, no network at run or install time), and leaves out DVC's
``{scripts}`` placeholder, where DVC would put the CDN tags. Everything else (which plots, their
axes, titles and templates: ``dvc.yaml``'s top-level ``plots:``; images copied under
``static/``) is DVC's.

    python -m paperworks.core.plots_page                      # dvc plots show  → dvc_plots/index.html
    python -m paperworks.core.plots_page diff HEAD~1          # dvc plots diff HEAD~1
    python -m paperworks.core.plots_page show plots/control   # only these targets
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TEMPLATE = """<!DOCTYPE html>
<html>
<head>
    <meta charset="utf-8">
    <title>paperworks plots</title>
    <script>{bundle}</script>
    <style>
        body {{ font-family: sans-serif; }}
        table {{ border-spacing: 15px; }}
        img {{ max-width: 100%; }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>"""


def offline_template() -> str:
    """DVC's page template with the Vega-Embed/Vega-Lite/Vega bundle inline."""
    try:
        import vl_convert
    except ModuleNotFoundError:
        raise SystemExit("error: the offline plots page needs vl-convert-python (pinned in requirements.lock): "
                         "run `make setup`") from None
    bundle = vl_convert.javascript_bundle()  # sets window.vegaEmbed / vega / vegaLite
    # a literal "</script" inside the bundle would end the <script> element early
    return TEMPLATE.format(bundle=bundle.replace("</script", "<\\/script"))


def build(args: list[str], out: Path, repo: Path = Path(".")) -> Path:
    """Run ``dvc plots <args> --html-template <offline> --out <out>``; return the page's path."""
    with tempfile.TemporaryDirectory(prefix="paperworks-plots-") as tmp:
        template = Path(tmp) / "offline.html"
        template.write_text(offline_template(), encoding="utf-8")
        dvc = shutil.which("dvc", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") or "dvc"
        cmd = [dvc, "plots", *args, "--html-template", str(template), "--out", str(out)]
        env = dict(os.environ, DVC_NO_ANALYTICS="1")
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"error: {' '.join(cmd[:3])} failed ({proc.returncode}):\n{proc.stderr.strip()}")
    page = (repo / out / "index.html") if not out.is_absolute() else out / "index.html"
    if not page.exists():
        raise SystemExit(f"error: dvc plots wrote no page at {page}")
    return page


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="show", choices=["show", "diff"], help="dvc plots show or diff")
    ap.add_argument("rest", nargs="*", help="targets (show) or revisions (diff), passed to dvc plots")
    ap.add_argument("--out", default="dvc_plots", help="folder of the page (default: dvc_plots, git-ignored)")
    a = ap.parse_args(argv)
    page = build([a.command, *a.rest], Path(a.out))
    print(f"{page}: offline plots page (open it in a browser)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
