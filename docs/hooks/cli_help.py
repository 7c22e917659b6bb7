"""Print every `eoscale` command's `--help` as JSON: {"eoscale ingest": "usage: …", "eoscale slurm render": …}.

Run by the site's hook (`docs/hooks/eoscale_docs.py`) in a subprocess, so that the CLI reference is generated from
the commands themselves: each module of `eoscale.cli.COMMANDS` is configured into an argparse parser exactly as
`eoscale.cli.main` does it, and subcommands (`eoscale slurm render`, `eoscale bench ingest`, …) are walked. The
LightningCLI commands (`fit`, `validate`, `test`, `pretrain`) have no argparse options of their own: their page is
their real `--help` output (LightningCLI's options and the launcher's).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys

# a fixed width, so that the page does not depend on the terminal of whoever builds it
os.environ["COLUMNS"] = "100"

LIGHTNING = ("pretrain", "fit", "validate", "test")


def walk(parser: argparse.ArgumentParser, name: str, out: dict[str, dict]) -> None:
    """`parser`'s help and option strings under `name`, then each subcommand's."""
    options = sorted({s for a in parser._actions for s in a.option_strings})
    out[name] = {"help": parser.format_help(), "options": options}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                walk(sub, f"{name} {sub_name}", out)


def lightning_help(name: str) -> str:
    from eoscale import cli

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
        cli.main([name, "--help"])
    return buffer.getvalue()


def bench_help(out: dict[str, dict]) -> None:
    """`eoscale bench NAME --help` for every benchmark, built as `eoscale.bench.command.run` builds it."""
    from eoscale.bench import command

    for name, (module_name, help_text) in command.BENCHMARKS.items():
        parser = argparse.ArgumentParser(prog=f"eoscale bench {name}", description=help_text)
        importlib.import_module(module_name).configure(parser)
        parser.add_argument("--record", default="benchmarks", metavar="DIR",
                            help="folder to record the figures in (default: %(default)s; '' to not record)")
        walk(parser, f"eoscale bench {name}", out)


def main() -> None:
    from eoscale import cli

    out: dict[str, dict] = {}
    top = cli.build_parser()
    out["eoscale"] = {"help": top.format_help(), "options": ["--help", "--version"],
                      "commands": {name: text.replace("%%", "%") for name, (_, text) in cli.COMMANDS.items()}}
    for name, (module_name, help_text) in cli.COMMANDS.items():
        if name in LIGHTNING:
            text = lightning_help(name)
            options = sorted({w.strip("[],") .split("=")[0] for w in text.split() if w.startswith(("--", "[--"))})
            out[f"eoscale {name}"] = {"help": text, "options": [o.lstrip("[") for o in options], "lightning": True}
            continue
        parser = argparse.ArgumentParser(prog=f"eoscale {name}", description=help_text.replace("%%", "%"))
        importlib.import_module(module_name).configure(parser)
        walk(parser, f"eoscale {name}", out)
        if name == "bench":  # each benchmark parses its own options (eoscale.bench.command.run)
            bench_help(out)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
