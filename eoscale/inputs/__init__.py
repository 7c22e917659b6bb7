"""A model's inputs described once (`spec.InputSpec`: sensors, their bands and timelines, static layers, grid,
statistics, nodata and presence, date encoding) and prepared once (`prepare.prepare`): the loader, predict's reader
and serve all call the same function, so a window goes to the network as the same tensor from any of them."""

from eoscale.inputs.prepare import prepare
from eoscale.inputs.spec import InputSpec, SensorInput, Timeline

__all__ = ["InputSpec", "SensorInput", "Timeline", "prepare"]
