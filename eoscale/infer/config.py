"""What `eoscale predict` takes, in one place: each option is a dataclass field that carries its flag, help and
parsing; the command line is generated from them and one `check_config` checks them, so a name, a default or
a limit cannot differ between the flag, the Python API (`PredictConfig`) and the error message.

No torch here: `eoscale predict --help` builds its parser from this module alone. The constants the options
default to (`COLUMN_TILE`, `RAMPS`) live here and `eoscale.infer.predict` / `eoscale.infer.blend` import them.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from eoscale.errors import InputError
from eoscale.inputs.missing import MISSING_SENSOR
from eoscale.paths import Paths
from eoscale.store.schema import SPLITS

COLUMN_TILE = 4096  # widest sweep, in columns (halo included): bounds memory at ~bytes_per_column × this
Ramp = Literal["cosine", "linear"]
RAMPS: tuple[str, ...] = ("cosine", "linear")
DEVICES = ("auto", "cpu", "cuda")
UNCERTAINTY = ("none", "entropy", "margin")  # eoscale.infer.outputs.uncertainty (no torch here)


def _names(text: str) -> list[str]:
    return [b.strip() for b in text.split(",") if b.strip()]


def option(flag: str, help: str, *, default: Any = MISSING, show_default: bool = True, **argparse_kwargs: Any) -> Any:
    """A dataclass field that is also a command-line option (`flag`, `help` and argparse's other keywords)."""
    metadata = {"flag": flag, "help": help + (" (default: %(default)s)" if show_default and default not in (MISSING, None, False)
                                              and "action" not in argparse_kwargs else ""), **argparse_kwargs}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class PredictConfig:
    """Everything one prediction run needs: the command line's options, as data."""

    checkpoint: str | None = option("--checkpoint", "an eoscale checkpoint file (from 'eoscale fit'); a run's folder or "
                                    "its checkpoints/ folder (its best checkpoint by the fit's val metric, else "
                                    "last.ckpt); or a registered model: models:/NAME/VERSION or models:/NAME@ALIAS; "
                                    "with --server, only for the maps' lineage (default there: the server's checkpoint)",
                                    action=Paths)
    inputs: list[str] = option("--input", "scenes: multi-band GeoTIFFs or folders of one file per band (globs allowed)",
                               nargs="+", action=Paths, metavar="SCENE", group="source")
    output: str = option("--output", "folder for the maps, area tables and mlflow.db", required=True)
    stac: list[str] | None = option("--stac", "scenes as STAC Items: an Item JSON, an ItemCollection JSON or a folder "
                                    "of Item JSON files, their assets local or relative files", default=None,
                                    nargs="+", action=Paths, metavar="ITEMS", group="source")
    adapter: str | None = option("--adapter", "a LoRA adapter written by a LoRA fit: adapters/NAME in the checkpoint's "
                                 "folder or one of the three above it (its run's root)", default=None, metavar="NAME")
    window: int | None = option("--window", "window size (default: the checkpoint's tile size)", default=None,
                                type=int, metavar="PX")
    overlap: float = option("--overlap", "overlap of neighbouring windows, a fraction of the window", default=0.25,
                            type=float)
    batch_size: int = option("--batch-size", "windows per forward pass, at most: a row of windows is split into equal "
                             "batches", default=16, type=int)
    column_tile: int = option("--column-tile", "widest sweep over a scene, in columns, halo included: bounds memory; "
                              "the map is the same whatever it is", default=COLUMN_TILE, type=int, metavar="PX")
    readers: int | None = option("--readers", "threads reading each process's scene strips (default: 1 beside a CPU "
                                 "model, which needs the cores; beside a GPU up to 8, leaving 2 of the process's cores "
                                 "free)", default=None, type=int, metavar="N")
    devices: int = option("--devices", "processes to start (one per GPU, or CPU processes); ignored under "
                          "srun/torchrun", default=1, type=int, show_default=False)
    device: str = option("--device", "where the model runs (auto: CUDA if available, with bf16 autocast)",
                         default="auto", choices=DEVICES)
    confidence: bool = option("--confidence", "also write <scene>_confidence.tif: the mapped class's probability, "
                              "0-100", default=False, action="store_true")
    uncertainty: str = option("--uncertainty", "also write <scene>_uncertainty.tif (class models): how unsure each "
                              "pixel is, 0-100: the entropy of its class probabilities / log(classes), or 1 - the "
                              "margin between its two most probable classes", default="none", choices=UNCERTAINTY)
    probabilities: bool = option("--probabilities", "also write <scene>_probabilities.tif (class models): every "
                                 "class's probability, one band a class named after it, uint8 x 0.005",
                                 default=False, action="store_true")
    smooth: str | None = option("--smooth", "post-classification Bayesian smoothing of the class probabilities (class "
                                "models), as sits_smooth: bayes, bayes:WINDOW or bayes:WINDOW:SMOOTHNESS (default "
                                "window 7, smoothness 10); the map, confidence, uncertainty and probabilities are made "
                                "from the smoothed probabilities", default=None, metavar="bayes[:W[:S]]")
    mmu: int = option("--mmu", "minimum mapping unit (class models): regions of one class smaller than PIXELS take "
                      "the class of their largest neighbour (a sieve, 8-connected; 0: none)", default=0, type=int,
                      metavar="PIXELS", show_default=False)
    overwrite: bool = option("--overwrite", "replace the maps of scenes already predicted", default=False,
                             action="store_true")
    band_names: list[str] | None = option("--band-names", "names of a multi-band file's bands, in file order, when "
                                          "its bands have no descriptions", default=None, type=_names,
                                          metavar="B02,B03,...")
    band_map: str | None = option("--band-map", "apply the model to another sensor's bands: scene band=model band "
                                  "pairs, e.g. SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A (a model is never applied to "
                                  "another sensor's bands without it)", default=None, metavar="SR_B2=B02,...")
    static: list[str] | None = option("--static", "DEM files, one covering each scene, for a checkpoint trained with "
                                      "static layers (ingest --static): the same layers are added to each scene",
                                      default=None, nargs="+", action=Paths, metavar="DEM")
    dem_datum: str | None = option("--dem-datum", "take a DEM whose file notes another vertical datum than EGM2008 "
                                   "as it is", default=None, metavar="NAME")
    missing_sensor: str = option("--missing-sensor", "a checkpoint of several sensors, a scene without a scene of one "
                                 "of its other sensors: refuse (one line), or dropout (that sensor's channels read 0, "
                                 "as in training with sensor dropout)", default="refuse", choices=MISSING_SENSOR)
    ramp: str = option("--ramp", "how a window's weight falls off over the overlap when windows are blended",
                       default="cosine", choices=RAMPS)
    server: str | None = option("--server", "a Triton server running 'eoscale serve' (http://HOST:8000 or "
                                "grpc://HOST:8001): its model computes the windows, this process reads and blends",
                                default=None, metavar="URL")
    model: str | None = option("--model", "with --server: the served model (default: landcover, or "
                               "landcover-ADAPTER with --adapter)", default=None, metavar="NAME")
    progress: bool = option("--no-progress", "no progress bar", default=True, action="store_false")
    profile: bool = option("--profile", "trace a few batches of each process with torch.profiler into "
                           "<output>/profile/ (gzipped Chrome traces, summary.md and summary.png; also logged to "
                           "MLflow)", default=False, action="store_true")


@dataclass(frozen=True)
class RunOptions:
    """The options around a run rather than of it: where it is tracked, and evaluation on a tile store."""

    store: str | None = option("--store", "a tile store: evaluate on its --split instead of mapping scenes",
                               default=None, action=Paths, group="source")
    items: str | None = option("--items", "scenes as the Items of a frozen item list ('eoscale search'), read from "
                               "the cache 'eoscale stage' downloaded them into (offline: nothing is fetched)",
                               default=None, metavar="LIST", action=Paths, group="source")
    cache: str | None = option("--cache", "with --items: the staging cache (default: beside the list, LIST's name "
                               "with .cache)", default=None, metavar="DIR", action=Paths)
    split: str = option("--split", "with --store: the split to evaluate on", default="test", choices=SPLITS)
    num_workers: int = option("--num-workers", "with --store: data-loading workers", default=0, type=int,
                              show_default=False)
    tracking_uri: str | None = option("--tracking-uri", "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                      "sqlite:///<output>/mlflow.db)", default=None)


OPTION_CLASSES = (PredictConfig, RunOptions)


def flag(name: str) -> str:
    """The command-line flag of field `name` (for messages that name it)."""
    for cls in OPTION_CLASSES:
        for f in fields(cls):
            if f.name == name:
                return f.metadata["flag"]
    raise KeyError(name)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add every field of `PredictConfig` and `RunOptions` as an option; `--input` and `--store` exclude each other."""
    source = parser.add_mutually_exclusive_group(required=True)
    for cls in OPTION_CLASSES:
        for f in fields(cls):
            meta = dict(f.metadata)
            name = meta.pop("flag")
            target = source if meta.pop("group", None) == "source" else parser
            if f.default is not MISSING:
                meta["default"] = f.default
            target.add_argument(name, dest=f.name, **meta)


def from_args(args: argparse.Namespace) -> tuple[PredictConfig, RunOptions]:
    """The parsed command line as the two dataclasses."""
    def build(cls):
        # --store or --stac instead of --input: no scenes (argparse leaves the other members of the group None;
        # --stac keeps its default None)
        return cls(**{f.name: [] if getattr(args, f.name) is None and f.metadata.get("nargs") and f.default is MISSING
                      else getattr(args, f.name) for f in fields(cls)})

    return build(PredictConfig), build(RunOptions)


def check_config(config: PredictConfig) -> None:
    """Every option's limits, in one line naming the flag; the CUDA check imports torch only when asked for."""
    if not config.checkpoint and not config.server:
        raise InputError(f"give {flag('checkpoint')} (a file or models:/NAME/VERSION) or {flag('server')} URL")
    if config.model and not config.server:
        raise InputError(f"{flag('model')} {config.model!r} names a served model: give {flag('server')} URL too")
    if config.window is not None:
        from eoscale.infer.windows import check_window

        check_window(config.window, config.overlap)
    elif not 0.0 <= config.overlap < 1.0:
        raise InputError(f"{flag('overlap')} {config.overlap}: give a fraction of the window in [0, 1), e.g. 0.25")
    for name, minimum, what in (("batch_size", 1, "at least 1"), ("column_tile", 1, f"a number of columns, e.g. {COLUMN_TILE}"),
                                ("readers", 1, "at least 1 reading thread"), ("devices", 1, "at least 1")):
        value = getattr(config, name)
        if value is not None and value < minimum:
            raise InputError(f"{flag(name)} {value}: give {what}")
    if config.uncertainty not in UNCERTAINTY:
        raise InputError(f"{flag('uncertainty')} {config.uncertainty!r} is not one of {', '.join(UNCERTAINTY)}")
    if config.ramp not in RAMPS:
        raise InputError(f"{flag('ramp')} {config.ramp!r} is not one of {', '.join(RAMPS)}")
    if config.device not in DEVICES:
        raise InputError(f"{flag('device')} {config.device!r} is not one of {', '.join(DEVICES)}")
    if config.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"{flag('device')} cuda: no CUDA device is visible to this process")
