"""Moved to `eoscale.train.callbacks.profiling`; this path stays so that configs, notebooks and imports naming it keep working.

The module here *is* the new one (the same object in `sys.modules`), so its classes, functions and settings are
the same objects under either name.
"""

import sys

import eoscale.train.callbacks.profiling as _moved

sys.modules[__name__] = _moved
