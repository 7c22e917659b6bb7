"""Command-line options that name input files: a quoted glob expands as the shell would expand it unquoted.

A user on a cluster quotes globs (`--scenes 'data/*.tif'`) so that thousands of names do not hit the shell's
argument limit, and the docs show them quoted; every option that reads files must then take one. Each such option
is declared with `action=Paths` (or `AppendPaths` for an option given several times), and its value reaches the
command expanded: a pattern becomes its matches, sorted; a path without glob characters, or one that exists under
its literal name (`scene[1].tif`), stays as it is, so the command's own check of a missing file still speaks, and
values that are not files (`models:/NAME@ALIAS`, a profile's name) pass. A pattern that matches nothing, or several
files where the option takes one, is a one-line `UserError`: the CLI prints it and exits with 2.

`tests/test_cli_paths.py` walks every command's parser and fails on a file option declared without these actions.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Sequence

from eoscale.errors import InputError, InputNotFoundError


def expand(patterns: Sequence[str], *, what: str) -> list[str]:
    """`patterns` with each glob replaced by its matches (sorted), in the given order; `what` names the option."""
    paths: list[str] = []
    for pattern in patterns:
        if not glob.has_magic(pattern) or os.path.lexists(pattern):
            paths.append(pattern)
            continue
        matches = sorted(glob.glob(pattern))
        if not matches:
            where = "" if os.path.isabs(pattern) else f" (relative to {os.getcwd()})"
            raise InputNotFoundError(f"{what} {pattern!r} matches no file{where}: check the pattern")
        paths.extend(matches)
    return paths


def expand_one(pattern: str, *, what: str) -> str:
    """The one path `pattern` names: a glob must match exactly one file."""
    paths = expand([pattern], what=what)
    if len(paths) > 1:
        shown = ", ".join(paths[:3]) + (", …" if len(paths) > 3 else "")
        raise InputError(f"{what} {pattern!r} matches {len(paths)} files ({shown}): {what} takes one; narrow the pattern")
    return paths[0]


def _name(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else (action.metavar or action.dest)


class Paths(argparse.Action):
    """argparse's `store` for an option that names input files, its globs expanded (a list with `nargs`, else one)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, _expanded(self, values))


class AppendPaths(argparse.Action):
    """argparse's `append` for an option that names input files and may be given again (`--config A --config B`);
    a glob adds all its matches, sorted."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = list(getattr(namespace, self.dest, None) or [])
        patterns = [values] if isinstance(values, str) else list(values)
        setattr(namespace, self.dest, given + expand(patterns, what=_name(self)))  # each match as if given in turn


def _expanded(action: argparse.Action, values: str | Sequence[str] | None) -> str | list[str] | None:
    if values is None or values == action.default:  # an optional positional left out: its default, untouched
        return values
    if isinstance(values, str):
        if action.nargs in (None, "?"):
            return expand_one(values, what=_name(action))
        values = [values]
    return expand(values, what=_name(action))
