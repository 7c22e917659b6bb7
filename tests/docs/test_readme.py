"""The README's links into the documentation resolve (files and, for Markdown pages, their headings), and it
keeps the two quick-start commands and points at the site."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (and GitHub) gives a heading, for the plain headings used here."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text))


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert len(links) > 15
    broken = []
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(link)
        elif anchor and _slug_in(target, anchor) is False:
            broken.append(link)
    assert not broken, broken


def _slug_in(page: Path, anchor: str) -> bool:
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return anchor in {_slug(h) for h in headings}


def test_readme_keeps_the_quick_start():
    readme = (ROOT / "README.md").read_text()
    for command in ("bash scripts/quickstart.sh", "bash scripts/test.sh", "bash scripts/docs.sh"):
        assert command in readme
    for script in ("quickstart.sh", "test.sh", "docs.sh"):
        assert (ROOT / "scripts" / script).is_file()
