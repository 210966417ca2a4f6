"""Plots DVC draws right, on a page that renders offline (issue 22, item 8).

No headless browser can be installed here, so the equivalent check: the page DVC writes with the
project's template loads nothing from the network (no src/href/url() outside the page), carries
the Vega libraries inline, and each chart's spec, exactly as embedded in the page, renders to an
SVG with marks through vl-convert (the same Vega libraries the page carries), and (where node is
installed) the page's own inline bundle evaluates in node with the network shut.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

NAMED = [next(iter(p)) for p in yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"] if isinstance(p, dict)]


class Resources(HTMLParser):
    """Every URL the page would load: src/href attributes, and CSS url(...) / @import."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "data", "poster", "srcset") and value:
                self.urls.append((tag, value))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.inline_scripts.append(data)
        for m in re.finditer(r"(?:url\(|@import\s+)['\"]?([^'\")\s]+)", data):
            if not self._in_script:
                self.urls.append(("css", m.group(1)))


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    from paperworks.core.plots_page import build

    out = tmp_path_factory.mktemp("plots_page") / "page"
    return build(["show"], out, repo=REPO)


def specs_of(html: str) -> dict[str, dict]:
    found = re.findall(r"var spec = (\{.*?\});\s*vegaEmbed\('#([^']+)'", html, flags=re.S)
    return {div: json.loads(spec) for spec, div in found}


def test_page_loads_nothing_from_the_network(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    parser = Resources()
    parser.feed(html)
    remote = [(tag, url) for tag, url in parser.urls if re.match(r"(?i)(https?:)?//", url)]
    assert remote == [], remote[:5]
    assert "cdn.jsdelivr" not in html and "{scripts}" not in html
    bundle = max(parser.inline_scripts, key=len)
    assert "window.vegaEmbed=" in bundle.replace(" ", "") and len(bundle) > 100_000
    images = [url for tag, url in parser.urls if tag == "img" and not url.startswith("${")]
    assert images and all((page.parent / url).is_file() for url in images), images[:5]


def test_every_named_plot_is_on_the_page_with_its_title_and_renders(page: Path) -> None:
    import vl_convert

    specs = specs_of(page.read_text(encoding="utf-8"))
    by_title = {s.get("title", {}).get("text") if isinstance(s.get("title"), dict) else s.get("title"): s
                for s in specs.values()}
    declared = {next(iter(p)): next(iter(p.values())) for p in yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]
                if isinstance(p, dict)}
    assert declared, "dvc.yaml has no named plots"
    for name, props in declared.items():
        spec = by_title.get(props["title"])
        assert spec is not None, f"{name}: not on the page"
        assert spec["data"]["values"], f"{name}: no data points"
        svg = vl_convert.vegalite_to_svg(spec)
        marks = re.findall(r'class="mark-(?:symbol|line|rect)', svg)
        assert marks, f"{name}: the chart rendered no marks"
        assert props["x_label"] in svg and props["title"].replace("&", "&amp;") in svg


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_pages_own_bundle_evaluates_without_network(page: Path, tmp_path: Path) -> None:
    """The page's inline script, run in node with every network door shut (fetch and
    XMLHttpRequest throw), defines vegaEmbed: the libraries need nothing from outside to load."""
    parser = Resources()
    parser.feed(page.read_text(encoding="utf-8"))
    bundle = max(parser.inline_scripts, key=len)
    script = tmp_path / "load.js"
    script.write_text(
        "globalThis.window = globalThis;\n"
        "globalThis.fetch = () => { throw new Error('network used'); };\n"
        "globalThis.XMLHttpRequest = function () { throw new Error('network used'); };\n"
        + bundle + "\nprocess.stdout.write(typeof window.vegaEmbed);\n")
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "function"
