"""wva-adapter: the Workload Variant Autoscaler as an External Metrics API adapter and KEDA scaler."""

__version__ = "0.1.0"
__all__ = ["__version__"]
