"""eoscale: Earth-observation imagery to land-cover maps at HPC scale."""

__version__ = "0.1.0"
