"""`fast_init` (adapter/domain/frozen.py): the `__init__` it puts on a frozen slots dataclass builds the instance the
dataclass's own `__init__` builds — every field the same object, defaults, factories, keyword-only and `init=False`
fields and `__post_init__` included — for a class made here to cover each feature and for every class of the
package that carries the decorator; its `replace` gives what `dataclasses.replace` gives; the class stays frozen; and
classes it cannot serve are refused when made."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import pkgutil
from collections.abc import Callable
from dataclasses import FrozenInstanceError, InitVar, dataclass, field
from functools import partial
from typing import Any

import pytest

import adapter
from adapter.analyzers.predictive.forecast import ForecastConfig
from adapter.analyzers.queueing.model import RequestSize, ServiceParams
from adapter.domain.frozen import fast_init, replace, stock_init
from adapter.domain.ids import VariantKey

_EMPTY = inspect.Parameter.empty


@fast_init
@dataclass(frozen=True, slots=True)
class _Every:
    """Each kind of field `fast_init` handles."""

    required: Any
    defaulted: Any = 1.5
    listed: list[int] = field(default_factory=list)
    derived: int = field(init=False, default=7)
    made: dict[str, int] = field(init=False, default_factory=dict)
    set_after: str = field(init=False, repr=False, compare=False)
    named: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "set_after", f"after {self.required!r}")


def _fields(obj: Any) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]


def _stock(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
    """An instance built by the dataclass's own `__init__`."""
    obj = object.__new__(cls)
    stock_init(cls)(obj, *args, **kwargs)
    return obj


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param((1,), {}, id="defaults"),
        pytest.param(("r", 2.0, [3]), {"named": "n"}, id="every-parameter-given"),
        pytest.param((), {"required": "r", "listed": [1], "named": 0}, id="by-keyword"),
    ],
)
def test_builds_what_the_dataclass_builds(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    fast, stock = _Every(*args, **kwargs), _stock(_Every, *args, **kwargs)
    assert _fields(fast) == _fields(stock)
    assert fast == stock
    assert repr(fast) == repr(stock)
    assert fast.set_after == stock.set_after == f"after {fast.required!r}"
    for given in (*args, *kwargs.values()):  # what was passed is stored, not copied
        assert any(value is given for value in _fields(fast))


def test_each_instance_gets_its_own_factory_values() -> None:
    first, second = _Every(1), _Every(1)
    assert first.listed == []
    assert first.made == {}
    assert first.listed is not second.listed
    assert first.made is not second.made


def test_signature_is_the_dataclass_signature() -> None:
    fast = inspect.signature(_Every.__init__).parameters
    stock = inspect.signature(stock_init(_Every)).parameters
    assert [(p.name, p.kind) for p in fast.values()] == [(p.name, p.kind) for p in stock.values()]
    assert fast["defaulted"].default == 1.5
    assert fast["named"].default is None
    assert fast["required"].default is _EMPTY


def test_the_class_stays_frozen_hashable_and_picklable() -> None:
    key = VariantKey("ns", "va")
    with pytest.raises(FrozenInstanceError):
        key.name = "other"  # type: ignore[misc]
    assert hash(key) == hash(_stock(VariantKey, "ns", "va"))
    assert key == VariantKey("ns", "va")
    assert pickle.loads(pickle.dumps(key)) == key
    assert dataclasses.replace(key, name="b") == VariantKey("ns", "b")
    with pytest.raises(TypeError):
        VariantKey("ns")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Every(1, derived=3)  # type: ignore[call-arg]  # an init=False field is no parameter


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="nothing"),
        pytest.param({"required": "x"}, id="a-positional-field"),
        pytest.param({"listed": [9], "named": "k"}, id="a-factory-field-and-a-keyword-only-one"),
    ],
)
def test_replace_is_dataclasses_replace(changes: dict[str, Any]) -> None:
    original = _Every("r", 2.0, [1], named="n")
    fast, stock = replace(original, **changes), dataclasses.replace(original, **changes)
    assert _fields(fast) == _fields(stock)
    assert fast.set_after == stock.set_after
    for name in ("required", "defaulted", "listed", "named"):  # what is kept is the same object
        assert getattr(fast, name) is (changes[name] if name in changes else getattr(original, name))


def test_replace_refuses_what_is_no_init_field_and_serves_other_dataclasses() -> None:
    with pytest.raises(TypeError, match="bogus"):
        replace(VariantKey("ns", "a"), bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="derived"):
        replace(_Every(1), derived=3)  # type: ignore[call-arg]
    assert replace(_NoSlots(1), x=2) == _NoSlots(2)  # no fast_init: dataclasses.replace


def test_post_init_validation_still_runs() -> None:
    assert ServiceParams(9.5, 0.066, 8e-5) == _stock(ServiceParams, 9.5, 0.066, 8e-5)
    assert RequestSize(100.0, 50.0) == _stock(RequestSize, 100.0, 50.0)
    assert ForecastConfig() == _stock(ForecastConfig)
    with pytest.raises(ValueError, match="alpha_ms"):
        ServiceParams(0.0, 0.066, 8e-5)


class _Plain:
    pass


@dataclass(frozen=True)
class _NoSlots:
    x: int


@dataclass(slots=True)
class _NotFrozen:
    x: int


@dataclass(frozen=True, slots=True)
class _WithInitVar:
    x: int
    scale: InitVar[int] = 1


@pytest.mark.parametrize("cls", [_Plain, _NoSlots, _NotFrozen, _WithInitVar], ids=lambda c: c.__name__)
def test_refuses_what_it_cannot_serve(cls: type[Any]) -> None:
    with pytest.raises(TypeError, match="fast_init"):
        fast_init(cls)


def _decorated() -> list[type[Any]]:
    """Every class of the package that carries `fast_init`."""
    found = []
    for info in pkgutil.walk_packages(adapter.__path__, "adapter."):
        if info.name.endswith("__main__") or "_keda_pb" in info.name:
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == info.name and stock_init(obj) is not None:
                found.append(obj)
    return found


DECORATED = _decorated()


def _new(cls: type[Any], kwargs: dict[str, Any]) -> Any:
    """An instance built by the class's `__init__` (the `fast_init` one)."""
    return cls(**kwargs)


def _replaced(obj: Any, name: str, value: Any) -> Any:
    return replace(obj, **{name: value})


def _outcome(build: Callable[[], Any]) -> tuple[Any, tuple[type[BaseException], str] | None]:
    """What `build` returns, or the type and text of what it raises."""
    try:
        return build(), None
    except Exception as error:
        return None, (type(error), str(error))


def test_the_package_uses_it() -> None:
    assert len(DECORATED) >= 40


@pytest.mark.parametrize("cls", DECORATED, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_decorated_class_builds_what_its_dataclass_builds(cls: type[Any]) -> None:
    """Distinct placeholder objects for every parameter, then only the required ones (the defaults and factories):
    both `__init__`s store the same objects, or raise the same error (a `__post_init__` that checks its numbers)."""
    parameters = list(inspect.signature(stock_init(cls)).parameters.values())[1:]
    assert [p.name for p in parameters] == list(inspect.signature(cls.__init__).parameters)[1:]
    everything = {p.name: object() for p in parameters}
    required = {p.name: object() for p in parameters if p.default is _EMPTY}
    for kwargs in (everything, required):
        stock, refused = _outcome(partial(_stock, cls, **kwargs))
        fast, fast_refused = _outcome(partial(_new, cls, kwargs))
        assert fast_refused == refused
        if refused is not None:
            continue
        for name, value, expected in zip(
            [f.name for f in dataclasses.fields(cls)], _fields(fast), _fields(stock), strict=True
        ):
            if name in kwargs:
                assert value is kwargs[name], name
            else:  # a default is the same object; a factory's values are equal
                assert value is expected or value == expected, name
        for name in kwargs:  # replace: each field in turn, the others kept (or refused as building it is)
            other = object()
            replaced, refused = _outcome(partial(_replaced, fast, name, other))
            assert refused == _outcome(partial(_new, cls, {**kwargs, name: other}))[1]
            if refused is None:
                assert [getattr(replaced, n) for n in kwargs] == [other if n == name else kwargs[n] for n in kwargs]
