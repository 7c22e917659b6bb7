"""What `eoscale bench fusion` shares between its single-date run (`eoscale.bench.fusion`) and its season run
(`eoscale.bench.fusion_season`): the arms, the sensors' names, the clouds drawn over an optical scene at an exact
cover, and the check of the covers and arms asked for."""

from __future__ import annotations

import argparse

import numpy as np

ARMS = ("s2", "s1", "s1+s2")
OPTICAL, RADAR = "sentinel-2", "sentinel-1"
CLOUD_SCALES = (60.0, 20.0, 6.0)  # synth's cloud field (`eoscale.synth.render.cloud_masks`), in 20 m pixels


def cloud_mask(shape: tuple[int, int], cover: float, rng: np.random.Generator) -> np.ndarray:
    """Clouds over exactly `cover` of a scene: synth's fractal cloud field thresholded at that quantile (drawn on the
    20 m grid, as synth does, and repeated onto the 10 m one)."""
    from eoscale.synth.noise import fbm, quantile_mask

    coarse = ((shape[0] + 1) // 2, (shape[1] + 1) // 2)
    mask = quantile_mask(fbm(coarse, CLOUD_SCALES, rng), cover)
    return np.repeat(np.repeat(mask, 2, axis=0), 2, axis=1)[: shape[0], : shape[1]]


def parse_arms(args: argparse.Namespace) -> tuple[list[float], list[str]]:
    """The cloud covers and arms of `args`; a bad value (or too small a run) is one line."""
    from eoscale.errors import InputError

    try:
        covers = [float(v) for v in str(args.clouds).split(",") if v.strip()]
    except ValueError:
        covers = []
    if not covers or any(not 0 <= c < 1 for c in covers):
        raise InputError(f"--clouds {args.clouds!r}: give cloud covers as fractions in [0, 1), e.g. 0,0.5,0.9")
    arms = [a.strip() for a in str(args.arms).split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        raise InputError(f"--arms {args.arms!r}: choose among {','.join(ARMS)}")
    if args.steps < 1 or args.scenes < 2 or args.size < 2 * args.tile_size:
        raise InputError(f"need --steps >= 1, --scenes >= 2 (a val split) and --size of at least two tiles; got "
                         f"{args.steps}, {args.scenes} and {args.size}")
    if not 0 <= args.sensor_dropout < 1:
        raise InputError(f"--sensor-dropout {args.sensor_dropout}: give a probability in [0, 1)")
    return covers, arms


__all__ = ["ARMS", "CLOUD_SCALES", "OPTICAL", "RADAR", "cloud_mask", "parse_arms"]
