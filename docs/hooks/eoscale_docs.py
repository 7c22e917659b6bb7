"""The site's generated pages (a mkdocs hook, `hooks:` in mkdocs.yml), built from the repository at build time:

- `reference/cli.md`: every command's `--help`, from `eoscale.cli.COMMANDS` and each module's `configure()`
  (`docs/hooks/cli_help.py`, run in a subprocess with this interpreter);
- `reference/configs.md`: every YAML file under `configs/` with its header comment;
- `reference/benchmarks.md`: a table per `benchmarks/*.json` (its records, and the latest record's figures);
- `notebooks/*.ipynb`: the notebooks of `notebooks/`, rendered by mkdocs-jupyter; where `EOSCALE_DOCS_NOTEBOOKS`
  names a folder, its (executed) copies of them instead (the suite executes them there: tests/docs/test_site.py).

Nothing is written into the repository (the notebooks are staged in a temporary folder) and nothing is fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def _fence(text: str) -> str:
    """`text` in a fenced block that nothing in it can close."""
    fence = "````" if "```" in text else "```"
    return f"{fence}text\n{text.rstrip()}\n{fence}\n"


def _anchor(name: str) -> str:
    return name.replace(" ", "-")


def cli_page() -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("cli_help.py"))], capture_output=True,
                            text=True, env=env, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"docs/hooks/cli_help.py failed:\n{result.stderr[-4000:]}")
    commands = json.loads(result.stdout)
    lines = [
        "# Command-line reference",
        "",
        "Generated at build time from the commands themselves (`eoscale.cli.COMMANDS` and each command module's "
        "`configure()`; the LightningCLI commands' own `--help`). Every command has `--help`; errors in what you "
        "give print one line that names the problem and the fix, and exit with code 2.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name, help_text in commands["eoscale"]["commands"].items():
        lines.append(f"| [`eoscale {name}`](#{_anchor('eoscale ' + name)}) | {help_text} |")
    lines.append("")
    for full_name, entry in commands.items():
        if full_name == "eoscale":
            continue
        depth = "##" if full_name.count(" ") == 1 else "###"
        lines += [f"{depth} `{full_name}` {{ #{_anchor(full_name)} }}", ""]
        if entry.get("lightning"):
            lines += ["LightningCLI's options (a YAML `--config` sets the same keys), then eoscale's launcher options.",
                      ""]
        lines += [_fence(entry["help"]), ""]
    return "\n".join(lines)


def _header_comment(path: Path) -> str:
    out = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        out.append(line[1:].removeprefix(" "))
    return "\n".join(out)


def configs_page() -> str:
    lines = [
        "# Configurations",
        "",
        "The YAML files under `configs/` that drive `eoscale fit`, `validate`, `test` and `pretrain` (LightningCLI "
        "`--config`; a strategy file is a second `--config`), each with its header comment. Generated at build time.",
        "",
    ]
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        rel = path.relative_to(ROOT).as_posix()
        comment = _header_comment(path)
        lines += [f"## `{rel}`", ""]
        lines += [_fence(comment) if comment else "*(no header comment)*", ""]
        lines += ['??? note "the whole file"', "", "    ```yaml"]
        lines += [f"    {line}" if line else "" for line in path.read_text().rstrip().splitlines()]
        lines += ["    ```", ""]
    return "\n".join(lines)


def _flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict | list) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: value}


def _cell(value) -> str:
    if isinstance(value, float):
        text = f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    elif isinstance(value, list):
        text = ", ".join(_cell(v) for v in value)
    elif value is None:
        text = "—"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _commit(record: dict) -> str:
    """The record's git commit (eoscale.bench.record's provenance; records before it have none)."""
    provenance = record.get("provenance") or {}
    if not provenance.get("commit"):
        return "—"
    return f"`{provenance['commit'][:10]}`" + (" (dirty)" if provenance.get("dirty") else "")


def _command(record: dict) -> str:
    provenance = record.get("provenance") or {}
    command = provenance.get("command") or (record["command"] if isinstance(record.get("command"), str) else None)
    return f"`{_cell(command)}`" if command else "—"


def benchmarks_page() -> str:
    lines = [
        "# Benchmark figures",
        "",
        "Rendered at build time from `benchmarks/*.json` (each file a list of records that `eoscale bench NAME` "
        "appended, each with its date and machine, and since issue 45 its commit and command). For each file: its "
        "records, then the latest record's figures. "
        "What each benchmark measures and the discussion of its figures: [Benchmarks](benchmarks-notes.md).",
        "",
    ]
    for path in sorted((ROOT / "benchmarks").glob("*.json")):
        records = json.loads(path.read_text())
        if isinstance(records, dict):
            records = [records]
        lines += [f"## {path.name}", "", "| # | date | machine | cores | GPU | load at start | commit | command |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, record in enumerate(records):
            machine = record.get("machine") or {}
            lines.append(f"| {i} | {_cell(record.get('date'))} | {_cell(machine.get('cpu'))} | "
                         f"{_cell(machine.get('cores_available'))} | {_cell(machine.get('gpu'))} | "
                         f"{_cell(machine.get('load_average_1min_at_start'))} | {_commit(record)} | "
                         f"{_command(record)} |")
        latest = {k: v for k, v in _flatten(records[-1]).items() if not k.startswith(("machine.", "benchmark"))}
        lines += ["", f"Latest record ({_cell(records[-1].get('date'))}):", "", "| figure | value |", "|---|---|"]
        lines += [f"| `{key}` | {_cell(value)} |" for key, value in latest.items()]
        lines.append("")
    return "\n".join(lines)


def _notebooks() -> list[Path]:
    folder = os.environ.get("EOSCALE_DOCS_NOTEBOOKS")
    stored = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not folder:
        return stored
    executed = [Path(folder) / p.name for p in stored]
    missing = [str(p) for p in executed if not p.is_file()]
    if missing:
        raise RuntimeError(f"EOSCALE_DOCS_NOTEBOOKS={folder} lacks {', '.join(missing)}")
    return executed


_STAGES: list[str] = []  # temporary folders of this process's builds, removed at the next build and at shutdown


def _remove_stages() -> None:
    while _STAGES:
        shutil.rmtree(_STAGES.pop(), ignore_errors=True)


@event_priority(100)  # before mkdocs-jupyter's on_files, which takes the .ipynb files over
def on_files(files: Files, config) -> Files:
    for uri, make in (("reference/cli.md", cli_page), ("reference/configs.md", configs_page),
                      ("reference/benchmarks.md", benchmarks_page)):
        files.append(File.generated(config, uri, content=make()))
    # mkdocs-jupyter wraps a notebook's File and asks it for src_dir/src_uri, which a generated File lacks: the
    # notebooks are copied into a temporary docs-like folder and added as ordinary files of it
    _remove_stages()
    stage = tempfile.mkdtemp(prefix="eoscale-docs-")
    _STAGES.append(stage)
    (Path(stage) / "notebooks").mkdir()
    for notebook in _notebooks():
        shutil.copyfile(notebook, Path(stage) / "notebooks" / notebook.name)
        files.append(File(f"notebooks/{notebook.name}", src_dir=stage, dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_shutdown() -> None:
    _remove_stages()
