"""Metric values as canonical Kubernetes `resource.Quantity` strings (DecimalSI).

The HPA reads every external metric value as `Quantity.MilliValue()`, so milli precision is all that
matters on the wire. We mirror apimachinery exactly:

- rounding: a value with more than three decimals is rounded *up* to the next milli, away from zero
  (`Quantity.RoundUp(resource.Milli)`; parsing likewise never rounds a non-zero value to 0): 0.0001 → "1m",
  2/3 → "667m", -0.0001 → "-1m". A desired ratio must never read as a smaller value than it is.
- canonical form (`CanonicalizeBytes`): no fractional digits, the largest exponent that is a multiple of 3
  and loses nothing, an SI suffix for it: 3 → "3", 1.5 → "1500m", 0 → "0", 1500 → "1500", 2000 → "2k",
  1e6 → "1M". Exponents beyond "E" (10^18) use "e21"-style, as apimachinery does.

Floats are converted through their shortest decimal representation (`repr`), i.e. the number the float
prints as: 1.1 is 1.1, not 1.100000000000000088… (which would round up to "1101m"). This is what parsing
the float's text as a Quantity would give. NaN and infinities are rejected: they have no Quantity.
Pure; no I/O.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

__all__ = ["format_quantity", "milli_units"]

_SI_SUFFIXES = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_THOUSAND = Decimal(1000)


def milli_units(value: float | int) -> int:
    """`value` in thousandths, rounded away from zero to the next whole milli (apimachinery's RoundUp)."""
    if isinstance(value, bool):
        raise TypeError("a metric value must be a number, not a bool")
    if isinstance(value, int):
        return value * 1000
    if not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be represented as a Kubernetes Quantity")
    scaled = Decimal(repr(value)) * _THOUSAND
    return int(scaled.to_integral_value(rounding=ROUND_CEILING if scaled >= 0 else ROUND_FLOOR))


def format_quantity(value: float | int) -> str:
    """The canonical Quantity string for `value` (see the module docstring for the rules).

    >>> [format_quantity(v) for v in (3, 1.5, 0, 0.001, 2.5, 0.0001, 2000)]
    ['3', '1500m', '0', '1m', '2500m', '1m', '2k']
    """
    milli = milli_units(value)
    if milli == 0:
        return "0"
    sign = "-" if milli < 0 else ""
    mantissa = abs(milli)
    exponent = -3
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    # Back off to the next lower multiple of 3 so the mantissa stays an integer.
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    suffix = _SI_SUFFIXES.get(exponent)
    if suffix is None:
        suffix = f"e{exponent}"
    return f"{sign}{mantissa}{suffix}"
