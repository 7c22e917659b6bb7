"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, offline, with the notebooks
executed; every page is in the nav, every internal link and anchor of the built HTML resolves, the CLI reference
names every command and option, and (where Chromium is installed) a headless browser renders it.

The notebooks are executed here on the same small inputs as tests/notebooks (a tile store by the real ingest,
known MLflow runs, a small map) and handed to the build through EOSCALE_DOCS_NOTEBOOKS (docs/hooks/eoscale_docs.py).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LIGHTNING = ("pretrain", "fit", "validate", "test")
GENERATED = {"reference/cli.md", "reference/configs.md", "reference/benchmarks.md"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.slow  # the notebooks run and the CLI's help is built from every command: about a minute


def _offline_prefix() -> list[str]:
    """`unshare -rn` (a network namespace with nothing in it) where the kernel allows it: the build cannot fetch."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


@pytest.fixture(scope="module")
def executed_notebooks(tmp_path_factory, kernel) -> Path:
    import nbformat
    from nbclient import NotebookClient

    from tests.mlflow_runs import log_known_runs
    from tests.notebooks.runner import KERNEL
    from tests.notebooks.test_notebooks import write_map
    from tests.stores import make_store

    root = tmp_path_factory.mktemp("docs-notebook-inputs")
    (root / "mlflow").mkdir()
    uri = f"sqlite:///{root / 'mlflow' / 'mlflow.db'}"
    log_known_runs(uri, artifacts=root / "mlflow" / "mlartifacts")
    env = {"EOSCALE_STORE": str(make_store(root / "store", size=96)), "MLFLOW_TRACKING_URI": uri,
           "EOSCALE_MAP": str(write_map(root / "maps")), "JUPYTER_PATH": kernel, "MPLBACKEND": "Agg"}
    out = tmp_path_factory.mktemp("docs-notebooks")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
            notebook = nbformat.read(path, as_version=4)
            NotebookClient(notebook, kernel_name=KERNEL, timeout=300,
                           resources={"metadata": {"path": str(out)}}).execute()
            nbformat.write(notebook, out / path.name)
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory, executed_notebooks) -> Path:
    out = tmp_path_factory.mktemp("docs-site") / "site"
    env = dict(os.environ, EOSCALE_DOCS_NOTEBOOKS=str(executed_notebooks),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               # belt and braces where unshare is not allowed: any HTTP(S) request goes nowhere
               http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9", no_proxy="",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="",
               # mkdocs-material's notice about MkDocs 2 (a future release, nothing about this site) says WARNING
               NO_MKDOCS_2_WARNING="1")
    start = time.monotonic()
    result = subprocess.run([*_offline_prefix(), sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert "WARNING" not in result.stderr, result.stderr[-6000:]
    print(f"mkdocs build --strict: {seconds:.1f} s")
    return out


def _nav_files(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_files(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav(site):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_files(config["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    pages |= GENERATED | {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert sorted(nav) == sorted(pages), "pages and nav differ"
    assert len(set(nav)) == len(nav), "a page is in the nav twice"
    for page in nav:  # every nav entry was built
        built = site / re.sub(r"(index)?\.(md|ipynb)$", "", page) / "index.html"
        assert built.is_file() or (site / "index.html").is_file() and page == "index.md", page


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "link", "script", "img"):
                self.links.append(attrs[key])


@functools.cache
def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(errors="replace"))
    return parser


def _broken_links(site: Path) -> list[str]:
    """Every href/src of the built HTML that points into the site at a missing file or anchor."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("data:"):
                continue
            if not parts.path:
                target = page
            elif parts.path.startswith("/"):  # 404.html links from the site's root
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no {target})")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _parse(target).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no anchor)")
    return broken


def test_every_internal_link_resolves(site):
    assert len(list(site.rglob("*.html"))) > 25
    broken = _broken_links(site)
    assert not broken, "broken links:\n" + "\n".join(broken[:40])


def test_the_link_check_finds_broken_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<h2 id="here">x</h2><a href="#here">ok</a><a href="../b/">gone</a>'
                                               '<a href="../#nowhere">no anchor</a><a href="https://x.org/">out</a>')
    (tmp_path / "index.html").write_text('<a href="a/#here">ok</a><a href="/a/">root</a>')
    broken = _broken_links(tmp_path)
    assert [line.split(" (")[0] for line in broken] == ["a/index.html: ../b/", "a/index.html: ../#nowhere"], broken


def _options(parser: argparse.ArgumentParser, name: str, out: dict[str, set[str]]) -> None:
    out[name] = {s for a in parser._actions for s in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                _options(sub, f"{name} {sub_name}", out)


def _sections(page: str) -> dict[str, str]:
    """The CLI page's sections by heading id, as text."""
    pieces = re.split(r'<h[23] id="([^"]+)"', page)
    return {pieces[i]: html.unescape(re.sub(r"<[^>]+>", "", pieces[i + 1])) for i in range(1, len(pieces) - 1, 2)}


def test_cli_reference_names_every_command_and_option(site):
    from eoscale.bench import command as bench_command
    from eoscale.cli import COMMANDS
    from eoscale.train.launch.options import HELP as LAUNCHER_HELP

    sections = _sections((site / "reference" / "cli" / "index.html").read_text())
    expected: dict[str, set[str]] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        if name in LIGHTNING:
            launcher = LAUNCHER_HELP if name in ("fit", "pretrain") else {}  # --launcher ray runs fit and pretrain
            expected[f"eoscale {name}"] = {"--config", "--trainer.devices", "--trainer.max_steps", *launcher}
            continue
        parser = argparse.ArgumentParser(prog=f"eoscale {name}", description=help_text)
        importlib.import_module(module_name).configure(parser)
        _options(parser, f"eoscale {name}", expected)
    for name, (module_name, _) in bench_command.BENCHMARKS.items():
        parser = argparse.ArgumentParser(prog=f"eoscale bench {name}")
        importlib.import_module(module_name).configure(parser)
        _options(parser, f"eoscale bench {name}", expected)
    assert {f"eoscale {name}" for name in COMMANDS} <= set(expected)
    missing = []
    for command, options in expected.items():
        text = sections.get(command.replace(" ", "-"))
        if text is None:
            missing.append(f"{command}: no section")
            continue
        missing += [f"{command}: {option}" for option in sorted(options) if option not in text]
    assert not missing, "not in the CLI reference:\n" + "\n".join(missing)


def test_notebooks_are_rendered_executed(site):
    for name in ("01_tile_store", "02_compare_runs", "03_landcover_map"):
        page = (site / "notebooks" / name / "index.html").read_text()
        assert page.count("data:image/png;base64") >= 2, f"{name}: no figures (not executed?)"
    assert "tiles of 32 px" in (site / "notebooks" / "01_tile_store" / "index.html").read_text()


def test_generated_reference_pages(site):
    configs = (site / "reference" / "configs" / "index.html").read_text()
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        assert path.relative_to(ROOT).as_posix() in configs, path
    benchmarks = (site / "reference" / "benchmarks" / "index.html").read_text()
    for path in sorted((ROOT / "benchmarks").glob("*.json")):
        assert f'id="{path.stem}json"' in benchmarks, path.name  # one section (and its tables) per file


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on 127.0.0.1, as a browser sees it."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_search_index_finds_predict(served):
    with urllib.request.urlopen(f"{served}/search/search_index.json", timeout=10) as response:
        index = json.load(response)
    hits = [doc["location"] for doc in index["docs"] if "predict" in (doc["title"] + doc["text"]).lower()]
    assert any(location.startswith("reference/cli/") for location in hits), hits[:20]
    assert any(location == "reference/cli/#eoscale-predict" for location in hits), hits[:20]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)")
def test_cli_reference_renders_in_a_headless_browser(served, tmp_path):
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"{served}/reference/cli/"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    dom = result.stdout
    assert "eoscale predict" in dom and "--checkpoint" in html.unescape(dom)
    assert 'id="eoscale-predict"' in dom
    assert "md-search" in dom  # material's search box rendered with the page
