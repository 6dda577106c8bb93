"""Accelerator names: one spelling per GPU pool, whether it comes from a node label, a nodeSelector or a VA label.

Nodes say `nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB`; users label VAs `A100`. The GPU limiter compares
the two, so both go through `normalize_accelerator` (upstream's rule, research §4.3). Upstream normalised only
the node side, so a VA whose nodeSelector carries the long name saw 0 GPUs available and never scaled up.
"""

from __future__ import annotations


def normalize_accelerator(product: str) -> str:
    """ "NVIDIA-A100-SXM4-80GB" → "A100", "AMD-MI300X-…" → "MI300X", "INTEL-Max-1550-…" → "Max-1550",
    "Tesla-T4" → "T4"; a name without a dash is unchanged (case preserved)."""
    product = product.strip()
    if "-" not in product:
        return product
    parts = product.split("-")
    vendor = parts[0].upper()
    name = f"{parts[1]}-{parts[2]}" if vendor == "INTEL" and len(parts) >= 3 else parts[1]
    return name or product
