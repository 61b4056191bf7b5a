"""Which packages are installed, and their versions: :mod:`tpucheck.host` answers."""

from tpucheck.host import TF_DISTRIBUTIONS, installed, tensorflow_distribution

__all__ = ["TF_DISTRIBUTIONS", "installed", "tensorflow_distribution"]
