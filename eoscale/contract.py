"""The model contract: what an eoscale checkpoint promises about its input and its network.

Every eoscale checkpoint holds, under ``checkpoint["eoscale"]``, the band contract of the store it was
trained on: the sensor and band names in order (a band is (sensor, band): `eoscale.sensors`), the normalisation
mean/std per band, the tile size, the class table and the target kind (`TARGET_KINDS`: what the network's output
means, and so which output writer of `eoscale.infer.outputs` makes its maps; a checkpoint written before the kind
was recorded holds "classes"; an unknown kind is refused in one line naming the known ones).
Resuming, fine-tuning and prediction compare it with their store and refuse a mismatch in one line.

Since schema 2 it also holds, under ``checkpoint["eoscale_model"]``, the network's constructor arguments
(as nanoGPT keeps `model_args`): `eoscale.models.build_model(**model["args"])` plus the fine-tuning mode
rebuilds the network, so inference never needs the training code. Checkpoints written before carry the
same facts in Lightning's `hyper_parameters`; `model_spec()` reads either.

Since the lineage work it also holds, under ``checkpoint["eoscale_lineage"]``, the MLflow run that trained it
and the tile store it was trained on (path, fingerprint, input files): `checkpoint_lineage()` reads it, or
what an older checkpoint knows (its MLflow run id only).

Reading is plain data only (`torch.load(weights_only=True)`): a checkpoint never runs code. The one
exception is the tensors of sharded checkpoint folders, which their own libraries unpickle: torch's DCP folder
format (`*.distcp`, FSDP) and DeepSpeed's optimizer-state files (`*_optim_states.pt`, ZeRO), read only by
`eoscale consolidate` and by resuming: treat sharded folders as trusted input, as both libraries' documentation
says. Their metadata (`meta.pt`; rank 0's `*model_states.pt` under DeepSpeed) is read as plain data here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from eoscale.errors import BandMismatchError, InputError, InputNotFoundError
from eoscale.inputs.spec import InputSpec
from eoscale.sensors import recorded_sensor
from eoscale.sensors.groups import SensorGroup, groups_of, parse_groups

if TYPE_CHECKING:
    import torch

CONTRACT_KEY = "eoscale"
METADATA_FILE = "meta.pt"  # Lightning's name for the non-tensor part of a sharded checkpoint
RUN_KEY = "eoscale_mlflow_run_id"  # in a checkpoint: the MLflow run that wrote it (`eoscale.train.callbacks.monitor`)
# in a checkpoint (plain data): where it comes from, for `eoscale lineage`:
#   {"run": {run_id, tracking_uri, experiment_id}, "store": {path, fingerprint, scenes: [{scene, role, path, size,
#    sha256}]}, "eoscale_version"}; a link nobody knew is None
LINEAGE_KEY = "eoscale_lineage"
# what a network's output means: class probabilities ("classes": the maps of today), per-pixel values ("values":
# regression, float with nodata) or from-to classes of two dates ("change"); `BandContract.target`
TARGET_KINDS = ("classes", "values", "change")
DEFAULT_TARGET = "classes"  # a contract that records no target kind (written before it was recorded)
TARGET_TAG = "EOSCALE_TARGET"  # in a map's tags: its target kind; a map without it holds classes


def check_target(kind: object) -> str:
    """`kind` if it is one of `TARGET_KINDS`, else an InputError in one line naming them."""
    if kind not in TARGET_KINDS:
        raise InputError(f"target kind {kind!r} is not one eoscale knows: use one of {', '.join(TARGET_KINDS)}")
    return str(kind)


@dataclass(frozen=True)
class BandContract:
    """What a model expects of its input tiles."""

    bands: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    tile_size: int
    classes: tuple[dict, ...]  # {index, code, name, color}
    sensor: str | None = None  # eoscale.sensors; None: what the band names say (a record from before sensors were kept)
    target: str = DEFAULT_TARGET  # TARGET_KINDS: what the network's output means
    # "values": the per-pixel target the network was trained on: {name, units, mean, std, min, max}; the network
    # predicts (value - mean) / std, `activate` undoes it
    target_info: dict | None = None
    # how many dates the network takes at a time (`bands` are one date's; the store's T it was trained on): 1 a
    # single-date model, 2 a change model; a temporal model takes a stack of at most this many; a contract from before
    # dates were recorded: 1
    time_steps: int = 1
    # classes and change: the temperature T the logits are divided by before the softmax (temperature scaling,
    # `eoscale.models.calibration`), fitted on the val split by `fit` or `eoscale calibrate`; 1.0 (none) in a
    # checkpoint written before; `calibration` says how it was fitted: {pixels, ece_before, ece_after, by}
    temperature: float = 1.0
    calibration: dict | None = None
    # a model of several sensors: [{name, bands}] in channel order, each sensor a group of consecutive `bands`
    # (`eoscale.sensors.groups`); None: one sensor (`sensor`), as every checkpoint written before
    sensors: tuple[dict, ...] | None = None
    # how the store it was trained on put float scenes onto its uint16 scale (`eoscale ingest --scale/--offset`,
    # `eoscale.raster.float_optical`): {scale, offset}, which predict applies to float scenes; None: no float scenes
    # (every checkpoint written before), and predict refuses a float scene
    input_scale: dict | None = None
    # the input spec of the store it was trained on (`eoscale.inputs.spec`, `to_dict()`): sensors and their timelines,
    # static layers, nodata, date encoding; None: a checkpoint written before, whose spec `spec()` infers
    input_spec: dict | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensor", recorded_sensor(self.sensor, self.bands))
        if self.sensors is not None:
            groups = parse_groups(self.sensors, self.bands)  # one line if they do not cover the bands
            object.__setattr__(self, "sensors", tuple(g.to_dict() for g in groups))
        check_target(self.target)
        if not (float(self.temperature) > 0 and np.isfinite(float(self.temperature))):
            raise InputError(f"temperature {self.temperature!r} is not a positive number: refit it with "
                             "'eoscale calibrate'")
        object.__setattr__(self, "temperature", float(self.temperature))

    @classmethod
    def from_datamodule(cls, datamodule: Any) -> BandContract:
        stats = datamodule.statistics
        table = datamodule.class_table
        records = table.to_records() if hasattr(table, "to_records") else list(table)
        return cls(
            bands=tuple(str(b) for b in datamodule.band_names),
            mean=tuple(float(v) for v in _stat(stats, "mean")),
            std=tuple(float(v) for v in _stat(stats, "std")),
            tile_size=int(datamodule.tile_size),
            classes=tuple({k: r[k] for k in ("index", "code", "name", "color") if k in r} for r in records),
            sensor=getattr(datamodule, "sensor", None),
            target=getattr(datamodule, "target", None) or DEFAULT_TARGET,
            target_info=getattr(datamodule, "target_info", None),
            time_steps=int(getattr(datamodule, "time_steps", 1) or 1),
            sensors=getattr(datamodule, "sensors_record", None),
            input_scale=_store_input_scale(datamodule),
            input_spec=getattr(datamodule, "input_spec_record", None),
        )

    def to_dict(self) -> dict:
        """Plain lists and numbers only, so `torch.load(weights_only=True)` reads it."""
        return {
            "bands": list(self.bands),
            "mean": list(self.mean),
            "std": list(self.std),
            "tile_size": self.tile_size,
            "classes": [dict(c) for c in self.classes],
            "sensor": self.sensor,
            "target": self.target,
            **({"target_info": dict(self.target_info)} if self.target_info is not None else {}),
            **({"time_steps": self.time_steps} if self.time_steps > 1 else {}),  # single-date records as before
            # only once fitted, so an uncalibrated contract is written as before
            **({"temperature": self.temperature} if self.temperature != 1.0 or self.calibration else {}),
            **({"calibration": dict(self.calibration)} if self.calibration is not None else {}),
            **({"sensors": [dict(g) for g in self.sensors]} if self.sensors is not None else {}),
            **({"input_scale": dict(self.input_scale)} if self.input_scale is not None else {}),
            **({"input_spec": dict(self.input_spec)} if self.input_spec is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> BandContract:
        return cls(
            bands=tuple(data["bands"]),
            mean=tuple(data["mean"]),
            std=tuple(data["std"]),
            tile_size=int(data["tile_size"]),
            classes=tuple(dict(c) for c in data["classes"]),
            # a contract from before sensors were recorded: Sentinel-2 (eoscale.sensors.recorded_sensor)
            sensor=data.get("sensor"),
            # a contract from before target kinds were recorded: class maps
            target=data.get("target") or DEFAULT_TARGET,
            target_info=dict(data["target_info"]) if data.get("target_info") is not None else None,
            time_steps=int(data.get("time_steps") or 1),  # a record from before dates: one date
            # a contract from before calibration: no temperature (T = 1)
            temperature=float(data.get("temperature", 1.0)),
            calibration=dict(data["calibration"]) if data.get("calibration") is not None else None,
            # a contract from before several sensors: one sensor
            sensors=tuple(dict(g) for g in data["sensors"]) if data.get("sensors") is not None else None,
            # a contract from before float scenes: none
            input_scale=dict(data["input_scale"]) if data.get("input_scale") is not None else None,
            # a contract from before input specs: `spec()` infers it
            input_spec=dict(data["input_spec"]) if data.get("input_spec") is not None else None,
        )

    def spec(self) -> InputSpec:
        """The input spec predict and serve execute: the recorded one, or the one this contract implies."""
        return InputSpec.from_contract(self)

    def sensor_groups(self) -> tuple[SensorGroup, ...]:
        """The sensors of the input, each a group of consecutive bands (one group where `sensors` is None)."""
        return groups_of(self.sensors, self.bands, self.sensor)

    def sensor_names(self) -> list[str]:
        return [g.name for g in self.sensor_groups()]

    def output_channels(self) -> int:
        """The channels of the network's output the maps are made of: one per class (classes, change); one value
        for a "values" contract with its target recorded (one without: its output writer gives the count)."""
        if self.target == "values" and self.target_info is not None:
            return 1
        return len(self.classes)

    def activate(self, logits: torch.Tensor) -> torch.Tensor:
        """The network's raw output as what its maps are made of, float32: class probabilities (softmax over the
        channel axis, of the logits divided by the contract's `temperature`) for classes and change, the values
        themselves for values. Prediction and serving alike."""
        logits = logits.float()
        if self.target == "values":
            info = self.target_info
            # the network predicts the normalised value: back to the target's units
            return logits if info is None else logits * float(info["std"]) + float(info["mean"])
        if self.temperature != 1.0:
            logits = logits / self.temperature
        return logits.softmax(dim=1)

    def check(self, store: BandContract, *, what: str = "checkpoint") -> None:
        """Raise `BandMismatchError` naming the first difference between this contract and the store's."""
        self.check_dates(store.time_steps, what=what)
        problem = None
        if self.bands != store.bands:
            problem = f"bands {list(self.bands)}, the store has {list(store.bands)}"
        elif self.sensor != store.sensor:
            problem = f"{self.sensor} bands, the store has {store.sensor} bands of the same names"
        elif self.sensor_names() != store.sensor_names():
            problem = f"sensors {self.sensor_names()}, the store has {store.sensor_names()}"
        elif self.target != store.target:
            problem = f"target kind {self.target!r}, the store has {store.target!r}"
        elif self.tile_size != store.tile_size:
            problem = f"tile size {self.tile_size}, the store has {store.tile_size}"
        elif [(c["code"], c["name"]) for c in self.classes] != [(c["code"], c["name"]) for c in store.classes]:
            problem = (
                f"classes {[c['code'] for c in self.classes]}, the store has {[c['code'] for c in store.classes]}"
            )
        elif not (np.allclose(self.mean, store.mean, rtol=1e-4) and np.allclose(self.std, store.std, rtol=1e-4)):
            problem = "other normalisation statistics (mean/std per band) than the store"
        if problem:
            raise BandMismatchError(f"{what} was trained on {problem}: use a store ingested with the same bands")


    def check_dates(self, steps: int, *, what: str = "checkpoint") -> None:
        """Refuse, in one line, a stack of `steps` dates for a single-date model, one date for a temporal model,
        and more dates than the temporal model was trained on."""
        if self.time_steps == 1 and steps > 1:
            raise BandMismatchError(f"{what} is a single-date model and was given a stack of {steps} dates a tile: use "
                                    f"a model fitted on a stack (a temporal task), or a single-date store")
        if self.time_steps > 1 and steps == 1:
            raise BandMismatchError(f"{what} is a temporal model of {self.time_steps} dates and was given one date a "
                                    f"tile: give it a stack of dates (a store ingested with several dates)")
        if steps > self.time_steps:
            raise BandMismatchError(f"{what} takes at most {self.time_steps} dates a tile and was given {steps}: ingest "
                                    f"at most {self.time_steps} dates, or fit a model on a stack of {steps}")


def check_std(bands: tuple[str, ...] | list[str], std: tuple[float, ...] | list[float], *, what: str) -> None:
    """Refuse, in one line naming the band, normalisation statistics with a std that is not a positive number.

    Stores written before ingest refused them hold std 0 for a band without valid pixels (and for a band of one
    value): clamped to 1e-6, it scaled that band by 1,000,000 at training and prediction."""
    for band, value in zip(bands, std, strict=True):
        if not float(value) > 0:  # (NaN is not > 0)
            raise InputError(f"{what} gives band {band} a std of {float(value):g} (no valid pixel, or one value in "
                             f"all of them), which cannot normalise it: ingest again without band {band} and train "
                             f"on that store")


def _store_input_scale(datamodule: Any) -> dict | None:
    """The float scenes' conversion a datamodule's store records in its ingest parameters (None: none, or no store)."""
    from eoscale.store import schema

    attrs = getattr(datamodule, "attrs", None)
    stated = (attrs.get(schema.ATTR_INGEST) or {}).get("input_scale") if isinstance(attrs, Mapping) else None
    return {"scale": float(stated["scale"]), "offset": float(stated["offset"])} if stated else None


def _stat(stats: Any, name: str) -> list[float]:
    value = stats[name] if isinstance(stats, Mapping) else getattr(stats, name)
    return np.asarray(value, dtype=float).ravel().tolist()


def load_checkpoint(path: str | Path) -> dict:
    """Read a single-file checkpoint, or the metadata of a sharded one (FSDP or DeepSpeed), as plain data
    (`weights_only`)."""
    path = Path(path)
    deepspeed = False
    if path.is_dir():
        if (path / METADATA_FILE).is_file():
            path = path / METADATA_FILE
        elif (model_states := deepspeed_model_states(path)) is not None:
            path, deepspeed = model_states, True
        else:
            raise InputError(f"{str(path)!r} is a folder but not a sharded checkpoint (no {METADATA_FILE} and no "
                             f"DeepSpeed '{DEEPSPEED_TAG_FILE}' file)")
    elif not path.is_file():
        raise InputNotFoundError(f"no checkpoint at {str(path)!r}")
    import torch  # here, not at the top: the commands that read maps only (assess, sample, change, mosaic) need no torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # not a torch file, truncated, or pickled objects
        raise InputError(f"cannot read checkpoint {str(path)!r}: {str(err).splitlines()[0]}") from err
    if deepspeed:  # Lightning's part of the file: its own and eoscale's keys, as in meta.pt
        checkpoint = {k: v for k, v in checkpoint.items() if k not in DEEPSPEED_KEYS}
    return checkpoint


DEEPSPEED_TAG_FILE = "latest"  # in a DeepSpeed checkpoint folder: the name of the subfolder holding the files
# what DeepSpeed's engine writes into its model-states file beside the caller's (Lightning's) state
DEEPSPEED_KEYS = frozenset((
    "module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
    "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "sparse_tensor_module_names",
    "csr_tensor_module_names", "skipped_steps", "global_steps", "global_samples", "dp_world_size", "mp_world_size",
    "checkpoint_parallel_dimensions", "ds_config", "ds_version"))


def deepspeed_model_states(folder: str | Path) -> Path | None:
    """Rank 0's model-states file of the DeepSpeed checkpoint `folder` (Lightning's DeepSpeed strategy writes
    `<folder>/latest` naming `<folder>/<tag>/`: `mp_rank_00_model_states.pt` under ZeRO-1/2, one
    `zero_pp_rank_<r>_mp_rank_00_model_states.pt` a rank under ZeRO-3); None if `folder` is not one."""
    folder = Path(folder)
    if not (folder / DEEPSPEED_TAG_FILE).is_file():
        return None
    tag = folder / (folder / DEEPSPEED_TAG_FILE).read_text().strip()
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if (tag / name).is_file():
            return tag / name
    return None


def read_contract(path: str | Path) -> BandContract:
    checkpoint = load_checkpoint(path)
    if CONTRACT_KEY not in checkpoint:
        raise InputError(f"checkpoint {str(path)!r} has no band contract: it was not written by eoscale")
    return BandContract.from_dict(checkpoint[CONTRACT_KEY])


MODEL_KEY = "eoscale_model"  # in a checkpoint: {"args": build_model's keywords, "finetune": ..., "lora": ...}
# the task options that are the network's constructor arguments (the rest are training knobs)
MODEL_ARGS = ("backbone", "in_chans", "num_classes", "img_size", "decoder_channels", "drop_path_rate", "dropout",
              "task",  # "change": a change model of two dates (`eoscale.models.change`); absent: segmentation
              "architecture",  # a temporal model's (`eoscale.models.temporal`); absent: a single-date one
              "spectral_mlp",  # a pixel MLP beside the decoder (`SegmentationTask(spectral_mlp=N)`)
              # a network of several sensors (`eoscale.models.fusion`): how they enter, their groups, the stems' width
              "fusion", "sensors", "fusion_width")


def model_args_from_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """`build_model`'s keywords from a segmentation task's hyperparameters (backbone options flattened)."""
    args = {k: hparams.get(k) for k in MODEL_ARGS if hparams.get(k) is not None}
    args.update(dict(hparams.get("backbone_kwargs") or {}))
    return args


def model_spec(checkpoint: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """`{"args", "finetune", "lora"}` of a checkpoint: its own record, or (older files) its hyperparameters."""
    spec = checkpoint.get(MODEL_KEY)
    if spec is None:
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        if "backbone" not in hparams:
            raise InputError(f"checkpoint {str(path)!r} holds no segmentation model (no backbone or weights)")
        spec = {"args": model_args_from_hparams(hparams), "finetune": hparams.get("finetune", "full"),
                "lora": hparams.get("lora")}
    for name in ("in_chans", "num_classes"):
        if spec["args"].get(name) is None:
            raise InputError(f"checkpoint {str(path)!r} does not say its model's {name}: it was not written by 'eoscale fit'")
    args = dict(spec["args"])
    if args.get("architecture") == "utae":  # U-TAEs fitted before the encoding was recorded: days since first valid
        args.setdefault("date_encoding", "first_valid")
    return {"args": args, "finetune": spec.get("finetune") or "full", "lora": spec.get("lora")}


def checkpoint_lineage(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """`{"run", "store", "eoscale_version"}` of a checkpoint (`LINEAGE_KEY`); for a checkpoint written before it
    was recorded, the MLflow run id that it does carry (`RUN_KEY`) and None for the rest."""
    saved = dict(checkpoint.get(LINEAGE_KEY) or {})
    run = saved.get("run") or ({"run_id": str(checkpoint[RUN_KEY]), "tracking_uri": None, "experiment_id": None}
                               if checkpoint.get(RUN_KEY) else None)
    return {"run": run, "store": saved.get("store"), "eoscale_version": saved.get("eoscale_version")}
