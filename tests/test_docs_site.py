"""The documentation site as a reader gets it: built with mkdocs (strict) into a temporary directory, then
its HTML read without a browser. Every page that shows mkdocstrings' symbol badges (the ``class``,
``meth`` labels beside API headings) loads the stylesheet that draws them, and wide tables scroll
inside the page instead of being clipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.mark.timeout(300)
def test_symbol_badges_have_their_stylesheet(site: Path) -> None:
    pages = [p for p in site.rglob("*.html") if 'class="doc-symbol' in p.read_text(encoding="utf-8")]
    assert pages, "no page shows API symbol badges"
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "_mkdocstrings.css" in html, f"{page.relative_to(site)} shows badges without their stylesheet"
    css = (site / "assets" / "_mkdocstrings.css").read_text(encoding="utf-8")
    for kind in ("class", "method", "function", "attribute", "module"):
        assert f".doc-symbol-{kind}" in css, kind


@pytest.mark.timeout(300)
def test_wide_tables_scroll_instead_of_being_clipped(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "<table>" in index  # the overview table of the index page: plain tables
    sheets = re.findall(r'href="(assets/stylesheets/main\.[^"]+\.css)"', index)
    assert sheets, "the index page loads no theme stylesheet"
    css = (site / sheets[0]).read_text(encoding="utf-8")
    rule = re.search(r"table:not\(\[class\]\)\{([^}]*)\}", css)
    assert rule is not None and "overflow:auto" in rule.group(1) and "max-width:100%" in rule.group(1)
