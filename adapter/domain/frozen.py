"""Frozen value types that are built at the speed of their fields, not of `object.__setattr__`.

`@dataclass(frozen=True, slots=True)` gives the immutable values the core passes around, and a generated `__init__`
that stores every field through `object.__setattr__(self, name, value)`: the class's own `__setattr__` refuses, by
design. Each such store is a generic attribute assignment — the name looked up along the class's MRO to find its slot
descriptor, then the descriptor called — where a plain class's `self.name = value` is one specialised bytecode. A
decide constructs ~30 of these values a VA (conditions, bounds, decisions, allocations, the analyzers' states; counted
at 1,000 VAs with the shipped ConfigMaps), and py-spy put ~11 % of the decide in their `__init__`s
(docs/benchmarks/scale.md, item 14).

`fast_init` replaces a frozen slots dataclass's `__init__` with one that calls each field's slot descriptor itself
(`Cls.field.__set__`, the C setter that `object.__setattr__` ends in), found once when the class is made:

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Point:
        x: float
        y: float = 0.0

    # Point.__init__ is now, in effect:
    #     def __init__(self, x, y=0.0):
    #         _set_x(self, x)          # _set_x = Point.x.__set__ (the slot's member descriptor)
    #         _set_y(self, y)

Everything else stays the dataclass's: the signature (positional, defaults, `default_factory`, keyword-only fields,
`init=False` fields with a default or factory), `__post_init__` called last, and `__eq__`, `__hash__`, `__repr__`,
ordering, `__setattr__` (still refusing), pickling and `dataclasses.replace` (which calls `__init__`). The instances
are the ones the generated `__init__` builds, field for field (tests/core/test_frozen.py checks every class that
carries the decorator). Measured on a 6-field class: 670 → 430 ns a construction; a plain non-frozen class takes 180.
Why not give up `frozen=True` for the plain class's speed: immutability would then rest on the type checker alone,
and the core's values are shared between the decide thread, the servers and the flight recorder.

`replace(obj, **changes)` is `dataclasses.replace` without its walk over the fields (3.8 % of the same decide): a
`fast_init` class also gets a generated `__replace__` (Python 3.13's name for the protocol) that passes every field
the changes leave out, `self.f if f is KEEP else f`. For the type checker `replace` is `dataclasses.replace`, so each
call's field names are still checked.

`snapshot.pod_metrics_from_columns` goes further for the 100,000 `PodMetrics` of a cycle (field by field over all
of them, in C); a value built one at a time, as these are, takes this path.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["fast_init", "replace"]

_T = TypeVar("_T")

_STOCK_INIT = "__stock_init__"
"""The attribute of a `fast_init` `__init__` that holds the dataclass's own `__init__` (what the tests compare)."""


def fast_init(cls: type[_T]) -> type[_T]:
    """`cls`'s `__init__` replaced by one that stores through the slot descriptors (module docstring). `cls` must be a
    frozen dataclass with slots, without `InitVar` pseudo-fields; TypeError otherwise, when the class is made."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__qualname__} is not a frozen dataclass with slots")
    namespace: dict[str, Any] = {"MISSING": dataclasses.MISSING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # a dataclass, checked above
        setter = f"_set_{f.name}"
        namespace[setter] = getattr(cls, f.name).__set__  # the slot's member descriptor (its class's, if inherited)
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
        if not f.init:  # not a parameter: its default or factory, or nothing (then `__post_init__` sets it)
            if f.default is not dataclasses.MISSING:
                body.append(f"{setter}(self, _default_{f.name})")
            elif f.default_factory is not dataclasses.MISSING:
                body.append(f"{setter}(self, _factory_{f.name}())")
            continue
        if f.default is not dataclasses.MISSING:
            param, value = f"{f.name}=_default_{f.name}", f.name
        elif f.default_factory is not dataclasses.MISSING:
            param, value = f"{f.name}=MISSING", f"_factory_{f.name}() if {f.name} is MISSING else {f.name}"
        else:
            param, value = f.name, f.name
        (keyword if f.kw_only else positional).append(param)
        body.append(f"{setter}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    names = [p.partition("=")[0] for p in (*positional, *keyword)]
    stock = list(inspect.signature(cls.__init__).parameters)[1:]
    if names != stock:  # e.g. an InitVar, which it does not pass on
        raise TypeError(f"fast_init: {cls.__qualname__}.__init__ takes {stock}, not only its init fields")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}) -> None:\n" + "".join(f"    {line}\n" for line in body or ["pass"])
    made: dict[str, Any] = {}
    exec(source, namespace, made)  # our own text, built from the class's field names only
    init = made["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    setattr(init, _STOCK_INIT, cls.__init__)
    cls.__init__ = init  # type: ignore[method-assign]  # replacing the method is the point
    type.__setattr__(
        cls, "__replace__", _replacer(cls, names, len(positional))
    )  # a name the type checker does not know
    return cls


if TYPE_CHECKING:  # the type checker checks each call's field names as dataclasses.replace's
    from dataclasses import replace
else:

    def replace(obj, /, **changes):
        """`dataclasses.replace(obj, **changes)` for a `fast_init` class, without its walk over the fields: the
        class's `__replace__` (Python 3.13's name for it) passes every field the changes leave out from `obj`. A
        name that is not an init field raises TypeError (dataclasses.replace: ValueError for an `init=False`
        field). Any other dataclass goes to `dataclasses.replace`."""
        method = getattr(type(obj), "__replace__", None)
        if method is None:
            return dataclasses.replace(obj, **changes)
        return method(obj, **changes)


def _replacer(cls: type[Any], names: list[str], positional: int) -> Any:
    """`__replace__(self, /, *, f=KEEP, ...)` for every init field (`names`, the first `positional` of them passed
    by position): `cls(...)` with `self`'s value for each one left out. Example: `Point(1.0, 2.0).__replace__(y=5.0)`
    is `Point(1.0, 5.0)`."""
    value = "self.{0} if {0} is KEEP else {0}"
    arguments = [value.format(n) for n in names[:positional]]
    arguments += [f"{n}={value.format(n)}" for n in names[positional:]]
    source = (
        f"def __replace__(self, /, *, {', '.join(f'{n}=KEEP' for n in names)}):\n"
        if names
        else "def __replace__(self, /):\n"
    ) + f"    return cls({', '.join(arguments)})\n"
    made: dict[str, Any] = {}
    exec(source, {"KEEP": _KEEP, "cls": cls}, made)  # built from the class's field names only
    method = made["__replace__"]
    method.__qualname__ = f"{cls.__qualname__}.__replace__"
    method.__module__ = cls.__module__
    return method


_KEEP: Any = object()
"""`__replace__`'s default: the field keeps `self`'s value."""


def stock_init(cls: type[Any]) -> Any:
    """The dataclass's own `__init__` of a `fast_init` class, or None for any other class (for the tests)."""
    return getattr(cls.__init__, _STOCK_INIT, None)
