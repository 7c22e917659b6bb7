"""Moved to `eoscale.train.planning.state`; this path stays so that configs, notebooks and imports naming it keep working,
and warns once when imported (`eoscale.train.moved`).

The module here *is* the new one (the same object in `sys.modules`), so its classes, functions and settings are
the same objects under either name.
"""

import sys

import eoscale.train.planning.state as _moved
from eoscale.train.moved import warn_moved

warn_moved("eoscale.train.state")
sys.modules[__name__] = _moved
