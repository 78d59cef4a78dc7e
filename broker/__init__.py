"""broker: a multi-cloud, cost-aware GPU job broker."""

__version__ = "0.1.0"
