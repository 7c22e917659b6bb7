"""Every command-line option that reads files takes a quoted glob (`eoscale.paths`), and a new one cannot forget to.

Guards issue 46 item 8: `eoscale ingest --targets 'runs/chm/heights/*.tif'` stopped with "'runs/chm/heights/*.tif' is
not a readable raster" because --targets, unlike --scenes and --labels, passed the pattern on as a file name.
"""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from eoscale.bench.command import BENCHMARKS
from eoscale.cli import COMMANDS, main
from eoscale.errors import InputNotFoundError, UserError
from eoscale.paths import AppendPaths, Paths, expand

# An option names files when its metavar (else its dest) says so; each must expand globs unless it is listed below.
FILE_WORDS = re.compile(r"(?i)(^|[^a-z])(path|paths|file|files|csv|json|yaml|raster|ckpt|checkpoint|map|maps|map_a|"
                        r"map_b|store|dem|config|items|scene|sample|ref|reference|root|dir|folder|profile|template|"
                        r"prefix|data|heldout|uncertainty|classes|design|inputs|stac|targets|labels|scenes|"
                        r"static|statistics_from|dates_csv|output|out\.\w+|mosaic\.tif)($|[^a-z])")
# what each of these names is written, not read: no glob to expand
WRITTEN = {
    "synth OUTPUT", "synth --output",
    "ingest --output", "ingest --slurm-log-dir",
    "calibrate --output",
    "predict --output",
    "assess --output", "sample --output", "label --training-raster", "mosaic --output", "change --output",
    "adapter merge --output",
    "slurm render --output",
    "consolidate output",
    "compare --output",
    "serve --log-file",
    "stage --cache", "embed --output", "fewshot --output", "bench fewshot --work",
    "bench --record", "bench adapters --mlflow", "bench adapters --keep", "bench calibration --keep",
    "bench learning --synthetic", "bench loader --json",
}
# LightningCLI's own parser (jsonargparse) reads fit/pretrain/validate/test's --config and paths, not argparse
LIGHTNING = {"fit", "pretrain", "validate", "test"}


def _parsers():
    """(name, parser) of every command, subcommand and benchmark, configured as the CLI configures them."""
    for name, (module_name, _) in COMMANDS.items():
        if name in LIGHTNING or name == "bench":
            continue
        parser = argparse.ArgumentParser(prog=f"eoscale {name}")
        importlib.import_module(module_name).configure(parser)
        yield from _with_subparsers(name, parser)
    for name, (module_name, _) in BENCHMARKS.items():
        parser = argparse.ArgumentParser(prog=f"eoscale bench {name}")
        importlib.import_module(module_name).configure(parser)
        yield f"bench {name}", parser
    bench = argparse.ArgumentParser()
    bench.add_argument("--record", default="benchmarks", metavar="DIR")  # as eoscale.bench.command.run adds it
    yield "bench", bench


def _with_subparsers(name, parser):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _with_subparsers(f"{name} {sub}", subparser)


def _options():
    for name, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction,
                                   argparse._StoreConstAction, argparse._CountAction)) or action.choices \
                    or action.type is not None or action.nargs == argparse.REMAINDER:
                continue
            flag = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
            for option in action.option_strings:
                if option.startswith("--"):
                    flag = option
                    break
            yield f"{name} {flag}", action


def test_every_file_option_expands_globs():
    """An option whose metavar (else dest) names files expands globs (`action=Paths`/`AppendPaths`), or writes its file."""
    forgot, seen = [], set()
    for key, action in _options():
        names_files = FILE_WORDS.search(str(action.metavar or action.dest))
        seen.add(key)
        if names_files and key not in WRITTEN and not isinstance(action, (Paths, AppendPaths)):
            forgot.append(key)
    assert not forgot, f"file options without glob expansion (give them action=eoscale.paths.Paths): {forgot}"
    assert not WRITTEN - seen, f"WRITTEN names options that no longer exist: {sorted(WRITTEN - seen)}"


def test_the_check_sees_a_file_option_without_globs():
    """The walk itself: a plain string option named like a file is caught (so a new command's cannot slip by)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference-raster", metavar="RASTER")
    action = parser._actions[-1]
    assert FILE_WORDS.search(action.metavar) and not isinstance(action, (Paths, AppendPaths))


def _parse(command: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).configure(parser)
    return parser.parse_args(argv)


def test_ingest_targets_take_a_quoted_glob(tmp_path, monkeypatch):
    """The README's command: --targets 'runs/chm/heights/*.tif' reached ingest as one file name before."""
    monkeypatch.chdir(tmp_path)
    heights = tmp_path / "runs" / "chm" / "heights"
    heights.mkdir(parents=True)
    for name in ("scene_001_height.tif", "scene_000_height.tif"):
        (heights / name).write_bytes(b"")
    args = _parse("ingest", ["--scenes", "runs/chm/scenes/a.tif", "--targets", "runs/chm/heights/*.tif",
                             "--output", "runs/chm.zarr"])
    assert args.targets == ["runs/chm/heights/scene_000_height.tif", "runs/chm/heights/scene_001_height.tif"]
    assert args.scenes == ["runs/chm/scenes/a.tif"]  # a plain path stays as given: the command says it is missing


def test_predict_and_assess_take_globs_for_one_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.ckpt").write_bytes(b"")
    (tmp_path / "map_landcover.tif").write_bytes(b"")
    args = _parse("predict", ["--checkpoint", "run/*.ckpt", "--input", "*.tif", "--output", "maps"])
    assert args.checkpoint == "run/last.ckpt" and args.inputs == ["map_landcover.tif"]
    args = _parse("assess", ["*_landcover.tif", "--reference", "run/last.*"])
    assert args.map == "map_landcover.tif" and args.reference == "run/last.ckpt"


def test_repeatable_options_expand_each_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("b.yaml", "a.yaml", "c.yml"):
        (tmp_path / name).write_text("{}")
    args = _parse("plan", ["--config", "*.yaml", "--config", "c.yml"])
    assert args.config == ["a.yaml", "b.yaml", "c.yml"]


def test_an_unmatched_glob_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", "--scenes", "x.tif", "--targets", "heights/*.tif", "--output", "out.zarr"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--targets 'heights/*.tif' matches no file" in err
    assert not (tmp_path / "out.zarr").exists()


def test_a_glob_for_one_file_that_matches_several_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("a.ckpt", "b.ckpt"):
        (tmp_path / name).write_bytes(b"")
    assert main(["calibrate", "*.ckpt", "--store", "tiles.zarr"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "CKPT '*.ckpt' matches 2 files (a.ckpt, b.ckpt)" in err


def test_expand_keeps_order_literal_names_and_non_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("s2.tif", "s1.tif", "odd[1].tif"):
        (tmp_path / name).write_bytes(b"")
    # patterns in the given order, each sorted; a name that exists as written is itself, even with [ ]
    assert expand(["z.tif", "s*.tif", "odd[1].tif", "models:/landcover@champion"], what="--x") == [
        "z.tif", "s1.tif", "s2.tif", "odd[1].tif", "models:/landcover@champion"]
    with pytest.raises(InputNotFoundError) as raised:
        expand(["nothing/*.tif"], what="--x")
    assert isinstance(raised.value, UserError)  # one line, exit 2
