"""The documentation's maths renders without network, checked in a real browser.

The docs bundle MathJax (the ``sphinx-mathjax-offline`` package of the ``docs`` extra) instead
of loading it from a CDN.  Headless Chromium opens built pages with every host name made
unresolvable, runs their scripts, and the test reads the DOM after MathJax ran: every formula
Sphinx wrote (``<span class="math ...">`` / ``<div class="math ...">``) must have become a
typeset ``<mjx-container>``, with no MathJax error node.  Reference: the same page with the
CDN script it would load without the bundle shows no typeset formula at all
(``test_cdn_mathjax_does_not_render_offline``), so the check can fail.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it); without it the browser
tests are skipped locally and fail in CI (``CI=true``).
"""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from test_docs import IN_CI

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)),
                None)
MATH_NODE = re.compile(r'<(?:span|div) class="math notranslate nohighlight">')


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        msg = ("headless Chromium not found (install Debian's package: "
               "apt-get install -y chromium)")
        if IN_CI:
            pytest.fail(msg + "; CI must run the browser test")
        pytest.skip(msg)
    return CHROMIUM


def dump_dom(browser: str, page: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium without network."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def math_pages(html_root: Path) -> dict[Path, int]:
    """Built pages with formulas -> number of formulas Sphinx wrote in each."""
    found = {}
    for page in sorted(html_root.rglob("*.html")):
        if "_modules" in page.parts or "_static" in page.parts:
            continue
        n = len(MATH_NODE.findall(page.read_text(encoding="utf-8")))
        if n:
            found[page] = n
    return found


@pytest.mark.slow
def test_mathjax_is_bundled_not_fetched(built_docs):
    pages = math_pages(built_docs)
    assert len(pages) >= 5, "expected formulas on several pages (docs and API reference)"
    for page in pages:
        scripts = re.findall(r'<script[^>]*src="([^"]+)"', page.read_text(encoding="utf-8"))
        remote = [s for s in scripts if re.match(r"(https?:)?//", s)]
        assert not remote, f"{page.name} loads scripts from the network: {remote}"
        # (a rebuild into the same folder adds a "?v=<checksum>" query)
        assert any(s.split("?")[0].endswith("mathjax/tex-chtml.js") for s in scripts), page.name
    assert (built_docs / "_static" / "mathjax" / "tex-chtml.js").is_file()
    # CommonHTML output needs its web fonts beside the script
    assert list((built_docs / "_static" / "mathjax" / "output" / "chtml" / "fonts").rglob("*.woff"))


@pytest.mark.slow
def test_formulas_are_typeset_offline(built_docs, chromium):
    pages = math_pages(built_docs)
    names = {p.relative_to(built_docs).as_posix() for p in pages}
    assert {"focus.html", "qsv.html"} <= names, sorted(names)
    for page, expected in pages.items():
        dom = dump_dom(chromium, page)
        typeset = len(re.findall(r"<mjx-container\b", dom))
        assert typeset == expected, (
            f"{page.relative_to(built_docs)}: {typeset} of {expected} formulas typeset")
        assert "<mjx-merror" not in dom, f"{page.relative_to(built_docs)}: MathJax TeX error"


@pytest.mark.slow
def test_cdn_mathjax_does_not_render_offline(built_docs, chromium, tmp_path):
    """The reference: the page as it was, loading MathJax from the CDN, stays raw TeX."""
    page = built_docs / "qsv.html"
    html = page.read_text(encoding="utf-8")
    cdn = re.sub(r'src="_static/mathjax/tex-chtml\.js(\?v=[0-9a-f]+)?"',
                 'src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"', html)
    assert cdn != html
    copy = built_docs / "qsv_cdn_reference.html"  # same folder, so relative links still work
    copy.write_text(cdn, encoding="utf-8")
    try:
        dom = dump_dom(chromium, copy)
    finally:
        os.unlink(copy)
    assert "<mjx-container" not in dom
    assert MATH_NODE.search(dom)
