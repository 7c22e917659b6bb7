"""A model's inputs described once (`spec.InputSpec`: sensors, their bands and timelines, static layers, grid,
statistics, nodata and presence, date encoding) and prepared once (`prepare.prepare`): the loader, predict's reader
and serve all call the same function, so a window goes to the network as the same tensor from any of them.

`prepare` is imported from its module (`eoscale.inputs.prepare`), not from here: the spec is read by commands that
need no torch (assess, sample, change and mosaic read a map's contract), and importing torch costs them seconds."""

from eoscale.inputs.spec import InputSpec, SensorInput, Timeline

__all__ = ["InputSpec", "SensorInput", "Timeline"]
