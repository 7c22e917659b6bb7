"""`eoscale predict`'s options have one source, `eoscale.infer.config`: the flags, the Python API and the checks."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import fields

import pytest

from eoscale.errors import InputError
from eoscale.infer import config as options
from eoscale.infer.config import PredictConfig, RunOptions, check_config
from tests.processes import ROOT


def _parse(*argv: str) -> tuple[PredictConfig, RunOptions]:
    parser = argparse.ArgumentParser()
    options.configure(parser)
    return options.from_args(parser.parse_args(list(argv)))


def test_every_field_is_a_flag_and_every_flag_a_field():
    parser = argparse.ArgumentParser()
    options.configure(parser)
    dests = {a.dest for a in parser._actions} - {"help"}
    assert dests == {f.name for cls in options.OPTION_CLASSES for f in fields(cls)}
    flags = {s for a in parser._actions for s in a.option_strings}
    assert {"--input", "--store", "--ramp", "--no-progress", "--band-names", "--tracking-uri"} <= flags


def test_defaults_of_the_command_line_are_the_api_defaults():
    config, run = _parse("--checkpoint", "m.ckpt", "--input", "a.tif", "--output", "maps")
    assert config == PredictConfig(checkpoint="m.ckpt", inputs=["a.tif"], output="maps")
    assert run == RunOptions()


def test_options_parse_to_fields():
    config, run = _parse("--checkpoint", "m.ckpt", "--input", "a.tif", "b.tif", "--output", "maps", "--no-progress",
                         "--band-names", "B04, B03,B02", "--ramp", "linear", "--batch-size", "3", "--tracking-uri", "x")
    assert config.inputs == ["a.tif", "b.tif"] and not config.progress and config.ramp == "linear"
    assert config.band_names == ["B04", "B03", "B02"] and config.batch_size == 3 and run.tracking_uri == "x"
    config, run = _parse("--checkpoint", "m.ckpt", "--store", "t.zarr", "--output", "e", "--split", "val")
    assert config.inputs == [] and run.store == "t.zarr" and run.split == "val"


@pytest.mark.parametrize("change,flag", [({"batch_size": 0}, "--batch-size"), ({"column_tile": 0}, "--column-tile"),
                                          ({"readers": 0}, "--readers"), ({"devices": 0}, "--devices"),
                                          ({"overlap": 1.0}, "--overlap"), ({"ramp": "step"}, "--ramp"),
                                          ({"device": "tpu"}, "--device")])
def test_one_check_names_the_flag(change, flag):
    with pytest.raises(InputError, match=f"^{flag} "):
        check_config(PredictConfig(checkpoint="m", inputs=["a"], output="o", **change))


def test_help_needs_no_torch():
    code = ("import sys; from eoscale.cli import main\n"
            "try:\n    main(['predict', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--ramp {cosine,linear}" in done.stdout and "(default: 16)" in done.stdout
