"""Prometheus answers read and reduced: decoding, the digests, the series cache and the join. Pure, no I/O.

What `adapter.metrics.collector` does with a body once it has one; the collector keeps the HTTP, the threads and
the errors of the source. Apart so that each file reads as one job, and so that this module imports no HTTP
client (msgspec, numpy and the domain only). The collector's docstring gives the contract (drop reasons, latency
histograms, the series cache's part); the functions here are its reading.
"""

from __future__ import annotations

import enum
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import QueryError, SourceError
from adapter.domain.ids import MODEL_ORDER, ModelKey
from adapter.domain.latency import LatencyHistogram, ModelLatency
from adapter.domain.snapshot import ModelTraffic, PodMetrics, pod_metrics_from_columns
from adapter.metrics.queries import EPP_MODEL_LABEL, Query, QueryName

ERROR_TEXT_LIMIT = 300
"""Characters of a library error kept in `Collection.errors` (their texts can embed an 8 KB query URL)."""

PodKey = tuple[str, str]
FloatColumn = npt.NDArray[np.float64]
PodNumbers = npt.NDArray[np.intp]
"""One per-pod metric by pod number (`PodIndex`); NaN where the answer had no usable sample for the pod."""
Sample = tuple[Mapping[str, str], float]
"""One element of an instant vector as `parse_vector` returns it (labels, value)."""


# ------------------------------------------------------------------------------------------ the answer, typed


class Labels(msgspec.Struct, frozen=True, gc=False):
    """The labels the digests read from an answer element; msgspec skips every other label while decoding.

    Prometheus never sends an empty label value (empty is absent), so "" stands for absent, except `le`, where
    the digest tells a missing bound (None) from an unreadable one. Not tracked by the GC: strings only.
    """

    namespace: str = ""
    model_name: str = ""
    pod: str = ""
    pod_name: str = ""
    wva_model_id: str = ""
    num_gpu_blocks: str | None = None
    block_size: str | None = None
    le: str | None = None


assert EPP_MODEL_LABEL in Labels.__struct_fields__, "the EPP model label must be a field of Labels"


class Value(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """An element's `[t, "0.5"]`: the sample's time and its value, read as a number while decoding."""

    at_s: float
    number: float


class Element(msgspec.Struct, frozen=True, gc=False):
    """One element of an instant vector: `{"metric": {labels}, "value": [t, "0.5"]}`."""

    metric: Labels
    value: Value


class _Data(msgspec.Struct, gc=False):
    result: list[Element]


class _Answer(msgspec.Struct, gc=False):
    data: _Data


class _TextElement(msgspec.Struct, frozen=True, gc=False):
    """An element with its value still the string Prometheus sent: the reading `_as_numbers` falls back to."""

    metric: Labels
    value: tuple[float, str]


class _TextData(msgspec.Struct, gc=False):
    result: list[_TextElement]


class _TextAnswer(msgspec.Struct, gc=False):
    data: _TextData


_DECODER = msgspec.json.Decoder(_Answer, strict=False)
"""Lax: a value string becomes a float inside the decoder (8 ms of `float` calls saved a 100,000-element answer).
It reads `NaN`, `Inf`, `-Inf` and decimal numbers as `float` does; what it refuses (Prometheus' `+Inf`, and
spellings `float` accepts such as `+1`, `.5`, `1_0`) sends the whole answer to the text reading."""
_TEXT_DECODER = msgspec.json.Decoder(_TextAnswer)


class _RawElement(msgspec.Struct, frozen=True, gc=False):
    """An element with its labels left as the answer's bytes (`SeriesCache`): no strings made for them."""

    metric: msgspec.Raw
    value: Value


class _RawData(msgspec.Struct, gc=False):
    result: list[_RawElement]


class _RawAnswer(msgspec.Struct, gc=False):
    data: _RawData


_RAW_DECODER = msgspec.json.Decoder(_RawAnswer, strict=False)
"""`_DECODER`'s reading with the labels kept raw: lax alike, so it accepts and refuses the same values."""
_LABELS_DECODER = msgspec.json.Decoder(Labels, strict=False)
"""One element's labels as `_DECODER` reads them inside an answer (the same type, equally lax)."""


def decode_answer(body: bytes, url: str) -> list[Element]:
    """`data.result` of an instant-query answer body; QueryError naming the problem when it is not one."""
    try:
        return _DECODER.decode(body).data.result
    except msgspec.ValidationError:
        pass  # a value the lax reading refuses (or a malformed answer): read the strings, as `float` does
    except msgspec.DecodeError as e:
        raise _explain(lambda: json.loads(body), url, e) from e
    try:
        return _as_numbers(_TEXT_DECODER.decode(body).data.result)
    except msgspec.DecodeError as e:  # ValidationError is a DecodeError too
        raise _explain(lambda: json.loads(body), url, e) from e


def elements(result: Any) -> list[Element]:
    """An already decoded `data.result` (the simulator's answers) as Elements; QueryError when it is not one."""
    try:
        return msgspec.convert(result, list[Element], strict=False)
    except msgspec.ValidationError:
        pass
    try:
        return _as_numbers(msgspec.convert(result, list[_TextElement]))
    except msgspec.ValidationError as e:
        raise _explain(lambda: {"data": {"result": result}}, "the source", e) from e


def _as_numbers(result: Sequence[_TextElement]) -> list[Element]:
    """The text reading's elements with their values read by `float` (which accepts Prometheus' `+Inf`); a value
    it cannot read makes the whole answer malformed, as an element the digests cannot read does."""
    try:
        return [Element(e.metric, Value(e.value[0], float(e.value[1]))) for e in result]
    except ValueError as e:
        raise QueryError(f"malformed vector element in the answer: {error_text(e)}") from e


def _explain(load: Callable[[], Any], url: str, problem: msgspec.DecodeError) -> QueryError:
    """What is wrong with an answer the typed decoder refused, in the words of the checks it replaces."""
    try:
        document = load()
    except ValueError as e:
        return QueryError(f"answer from {url} is not JSON: {error_text(e)}")
    try:
        result = document["data"]["result"]
    except (KeyError, TypeError) as e:
        return QueryError(f"answer from {url} has no data.result: {error_text(e)}")
    if not isinstance(result, list):
        return QueryError(f"expected an instant vector (a list), got {type(result).__name__}")
    return QueryError(f"malformed vector element in the answer: {error_text(problem)}")


# ------------------------------------------------------------------------------------------ parsing


def parse_vector(result: Any) -> list[Sample]:
    """`data.result` of an instant-vector answer. Sample values are strings (`"0.5"`, `"NaN"`, `"+Inf"`)."""
    if not isinstance(result, list):
        raise QueryError(f"expected an instant vector (a list), got {type(result).__name__}")
    try:  # the fast path; on any error the slow path below names the element
        out: list[Sample] = [(item["metric"], float(item["value"][1])) for item in result]
        if all(type(labels) is dict for labels, _ in out):
            return out
    except (KeyError, TypeError, ValueError, IndexError):
        pass
    for item in result:
        try:
            labels = item["metric"]
            _, raw = item["value"]
            float(raw)
        except (KeyError, TypeError, ValueError) as e:
            raise QueryError(f"malformed vector element {str(item)[:120]}: {error_text(e)}") from e
        if not isinstance(labels, dict):
            raise QueryError(f"malformed vector element {str(item)[:120]}: metric is not an object")
    raise QueryError("malformed vector")  # unreachable: the fast path failed, so some element is malformed


def error_text(e: BaseException) -> str:
    """An exception as `Type: message`, cut at `ERROR_TEXT_LIMIT` characters."""
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 1] + "…"


# ------------------------------------------------------------------------------------------ assembly


_POD_FIELD = {
    QueryName.KV_CACHE_USAGE: "kv_cache_usage",
    QueryName.QUEUE_LENGTH: "queue_length",
    QueryName.RUNNING_REQUESTS: "running_requests",
    QueryName.AVG_INPUT_TOKENS: "avg_input_tokens",
    QueryName.AVG_OUTPUT_TOKENS: "avg_output_tokens",
    QueryName.PREFIX_CACHE_HIT_RATE: "prefix_cache_hit_rate",
    QueryName.AVG_TTFT: "avg_ttft_s",
    QueryName.AVG_ITL: "avg_itl_s",
    QueryName.DISPATCH_RATE: "arrival_rate_rps",
}
_MODEL_FIELD = {
    QueryName.REQUEST_COUNT: "request_count",
    QueryName.EPP_QUEUE_SIZE: "epp_queue_size",
    QueryName.EPP_QUEUE_BYTES: "epp_queue_bytes",
}
_HISTOGRAM_FIELD = {QueryName.TTFT_HISTOGRAM: "ttft", QueryName.TPOT_HISTOGRAM: "tpot"}
_UPPER_BOUND = {QueryName.PREFIX_CACHE_HIT_RATE: 1.0}
_INF = math.inf
_MALFORMED = (IndexError, TypeError, ValueError)
"""What reading a malformed element raises (a value that is not a number)."""


def _value_problem(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value < 0:
        return "negative"
    return "out-of-range"


MAX_GEOMETRY_LABEL = 2**31 - 1
"""The largest `num_gpu_blocks` / `block_size` read as one (vLLM's are int32); a larger one is an invalid label.
Why: tokens in use are usage × blocks × block size, a float; a product of 400 digits made the join raise
OverflowError and fail the whole collection. Below it the product fits an int64 (`_tokens_in_use`)."""


def _int_label(text: str | None) -> int | None:
    """A geometry label's integer, or None when absent or invalid (not an integer, negative, > MAX_GEOMETRY_LABEL)."""
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value <= MAX_GEOMETRY_LABEL else None


@dataclass(frozen=True, slots=True)
class PodIndex:
    """The pods behind VAs, numbered in (namespace, pod) order: a digest writes a per-pod metric into an array
    at the pod's number instead of a dict keyed by fresh (namespace, pod) tuples, and the join walks the numbers
    in order (the Collection's pods are sorted without a sort) with the inventory's own strings."""

    keys: tuple[PodKey, ...]
    variants: tuple[str, ...]
    number: Mapping[PodKey, int]
    namespaces: tuple[str, ...]
    """The namespace of each pod number (`keys[i][0]`)."""
    pods: tuple[str, ...]
    """The pod name of each pod number (`keys[i][1]`)."""
    by_pod: Mapping[str, int]
    """Pod name -> its number, or -1 for a name used in several namespaces: the digests' fast path looks a pod
    up by its name alone (one hash of a freshly decoded string instead of a tuple of two) and checks the
    namespace by equality."""

    @staticmethod
    def of(pod_variants: Mapping[PodKey, str]) -> PodIndex:
        keys = tuple(sorted(pod_variants))
        by_pod: dict[str, int] = {}
        for i, (_, pod) in enumerate(keys):
            by_pod[pod] = -1 if pod in by_pod else i
        return PodIndex(
            keys,
            tuple(pod_variants[k] for k in keys),
            {k: i for i, k in enumerate(keys)},
            tuple(namespace for namespace, _ in keys),
            tuple(pod for _, pod in keys),
            by_pod,
        )

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True, slots=True)
class Digest:
    """One answer reduced to what the Collection needs. Built right after decoding, so the decoded elements
    (a few MB per query at 1,000 VAs) are freed at once instead of waiting for every answer."""

    query: Query
    column: FloatColumn | None = None
    """A per-pod metric by pod number (NaN: no usable sample)."""
    geometry: Mapping[int, tuple[int, int]] | None = None
    """cache_config_info: (num_gpu_blocks, block_size) by pod number."""
    traffic: Mapping[ModelKey, float] | None = None
    """A model-level value (request count, EPP queue) by model."""
    histograms: Mapping[ModelKey, LatencyHistogram] | None = None
    """A latency histogram (TTFT or TPOT buckets) by model."""
    dropped: Mapping[str, int] = field(default_factory=dict)


def digest_body(series: SeriesCache, query: Query, body: bytes, index: PodIndex, url: str) -> Digest:
    """One answer's body decoded and reduced: a per-pod answer through the series cache when it can, anything else
    (or what the cache's reading refuses) by the typed path. Raises QueryError naming the problem (`url` is where
    the body came from, for the message). One thread at a time per `series`."""
    if query.name in SERIES_CACHED and (cached := series.digest(query, body, index)) is not None:
        return cached
    return digest(query, decode_answer(body, url), index)


def digest(query: Query, result: Sequence[Element], index: PodIndex) -> Digest:
    """Reduce one decoded `data.result`. All or nothing: a malformed element raises QueryError.

    Pure (no I/O); safe in any thread.
    """
    drops: Counter[str] = Counter()
    try:
        if query.name is QueryName.CACHE_CONFIG_INFO:
            return Digest(query, geometry=_geometry(query, result, index, drops), dropped=drops)
        if query.name in _MODEL_FIELD:
            return Digest(query, traffic=_model_values(query, result, drops), dropped=drops)
        if query.name in _HISTOGRAM_FIELD:
            return Digest(query, histograms=_histograms(query, result, drops), dropped=drops)
        return Digest(query, column=_column(query, result, index, drops), dropped=drops)
    except _MALFORMED as e:
        raise QueryError(f"malformed vector element in the answer: {error_text(e)}") from e


def _wanted(query: Query) -> tuple[set[tuple[str, str]], dict[str, set[str]]]:
    """The query's models as the per-pod digests test them: (namespace, model id) pairs for the exact checks, and
    model ids by namespace for the fast path."""
    wanted_in: dict[str, set[str]] = {}
    for k in query.models:
        wanted_in.setdefault(k.namespace, set()).add(k.model_id)
    return {(k.namespace, k.model_id) for k in query.models}, wanted_in


def _label_problem(namespace: str, pod: str, model: str, wanted: set[tuple[str, str]]) -> str | None:
    """The first two exact checks of a per-pod element off the fast path, in their order: a missing pod or model
    label, then a model the query did not ask for; the drop's reason, or None."""
    if not pod or not model:
        return "missing-label"
    if (namespace, model) not in wanted:
        return "unknown-model"
    return None


def _unlabelled_or_unwanted(
    namespace: str, pod: str, model: str, wanted: set[tuple[str, str]], drops: Counter[str]
) -> bool:
    """`_label_problem`, counted: whether the element is dropped."""
    if (problem := _label_problem(namespace, pod, model, wanted)) is None:
        return False
    drops[problem] += 1
    return True


def _column(query: Query, result: Sequence[Element], index: PodIndex, drops: Counter[str]) -> FloatColumn:
    """The hot loop of the typed path (100,000 elements per query at 10,000 VAs): each element's pod number, or the
    code of its label problem (`_CODE_REASON`), then the values kept or dropped over arrays by `_usable`, as the
    series cache's path keeps them. Several series of one pod (e.g. one per LoRA adapter's model_name) give its
    max, or their sum for the dispatch rate.

    Every label string is freshly decoded, so each hash is computed, never cached: the usual element takes the
    fast path (its pod by name in `index.by_pod`, its namespace compared by equality, its model in the set of
    the namespace's wanted models), and anything else the exact checks in order, which name the reason of a
    drop. Both paths accept the same elements (a fast-path pod is the index's (namespace, pod), its
    (namespace, model) is wanted)."""
    dispatch = query.name is QueryName.DISPATCH_RATE
    wanted, wanted_in = _wanted(query)
    number, by_pod, namespaces = index.number.get, index.by_pod.get, index.namespaces
    codes: list[int] = []
    last_namespace: str | None = None
    models: set[str] = set()
    for item in result:
        labels = item.metric
        namespace = labels.namespace
        pod, model = _pod_and_model(labels, dispatch=dispatch)
        if namespace != last_namespace:  # answers come grouped by namespace in practice: rarely taken
            last_namespace, models = namespace, wanted_in.get(namespace, set())
        i = by_pod(pod, -1)
        if i < 0 or namespaces[i] != namespace or model not in models:  # the exact checks, in order
            problem = _label_problem(namespace, pod, model, wanted)
            i = _REASON_CODE[problem] if problem is not None else number((namespace, pod), UNKNOWN_POD)
        codes.append(i)
    values = np.array([item.value.number for item in result], dtype=np.float64)
    at, samples = _usable(codes, values, _UPPER_BOUND.get(query.name, _INF), drops)
    return _to_column(at, samples, len(index), dispatch=dispatch)


def _to_column(at: PodNumbers, samples: FloatColumn, size: int, *, dispatch: bool) -> FloatColumn:
    """The accepted samples (pod number, value; in the answer's order) as a column of `size` pods: each pod's
    largest value, or for the dispatch rate their sum; NaN for a pod without one."""
    column = np.full(size, np.nan)
    if dispatch:  # summed in the answer's order, as a running sum would
        present = np.zeros(size, dtype=bool)
        present[at] = True
        sums = np.zeros(size)
        np.add.at(sums, at, samples)
        column[present] = sums[present]
    else:  # fmax ignores the NaN the column starts with
        np.fmax.at(column, at, samples)
    return column


# ------------------------------------------------------------------------------------------ per-pod series, cached

MISSING_LABEL, UNKNOWN_MODEL, UNKNOWN_POD, INVALID_LABEL = -1, -2, -3, -4
"""What a per-pod series says when it names no pod of the index (a pod's number is >= 0); INVALID_LABEL only in
cache_config_info's, whose geometry labels are not counts."""
_CODE_REASON = {
    MISSING_LABEL: "missing-label",
    UNKNOWN_MODEL: "unknown-model",
    UNKNOWN_POD: "unknown-pod",
    INVALID_LABEL: "invalid-label",
}
_REASON_CODE = {reason: code for code, reason in _CODE_REASON.items()}
SERIES_CACHED = frozenset(_POD_FIELD) | {QueryName.CACHE_CONFIG_INFO}
"""The answers `SeriesCache` reads: the per-pod ones. vLLM's eight name the same series; cache_config_info names
them with two labels more, the dispatch rate with the EPP's labels: three families, each with a cache of its own."""
SPARE_SERIES = 1024
"""The cache starts over when it holds more than twice the index's pods and this many series (pods gone but
still in the query window, labels naming no wanted pod: a namespace's other workloads churning)."""


class _Family(enum.Enum):
    """Answers whose elements name the same series in the same bytes, and how their labels name pod and model."""

    VLLM = "vllm"
    """The eight vLLM per-pod answers: `pod` (or `pod_name`), `model_name`."""
    GEOMETRY = "geometry"
    """cache_config_info: vLLM's labels and `num_gpu_blocks`, `block_size`."""
    DISPATCH = "dispatch"
    """The EPP's dispatch rate: the vLLM endpoint's `pod_name`, the model in `wva_model_id`."""

    @staticmethod
    def of(name: QueryName) -> _Family:
        if name is QueryName.CACHE_CONFIG_INFO:
            return _Family.GEOMETRY
        return _Family.DISPATCH if name is QueryName.DISPATCH_RATE else _Family.VLLM


def _pod_and_model(labels: Labels, *, dispatch: bool) -> tuple[str, str]:
    """The pod and model an element of a per-pod answer names (`_column`'s reading)."""
    if dispatch:  # dispatch series belong to the EPP's pod; the vLLM endpoint is `pod_name` only
        return labels.pod_name, labels.wva_model_id
    return labels.pod or labels.pod_name, labels.model_name


@dataclass(slots=True)
class _Series:
    """The series of one family of per-pod answers (`SeriesCache`): what each one's labels say, by their bytes."""

    family: _Family
    wanted: frozenset[ModelKey]
    wanted_pairs: set[tuple[str, str]]
    """(namespace, model id) of each wanted model (`_wanted`): the exact check of `_column`."""
    index: PodIndex
    codes: dict[bytes, int] = field(default_factory=dict)
    """The series' pod's number in `index`, or MISSING_LABEL, UNKNOWN_MODEL, UNKNOWN_POD, INVALID_LABEL."""
    shapes: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    """GEOMETRY: (num_gpu_blocks, block_size) of each series whose labels are counts."""
    distinct: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """GEOMETRY: each geometry `shapes` holds, once."""
    order: list[msgspec.Raw] = field(default_factory=list)
    """The series of the family's last answer read by `codes_of`, in its order (each wrapping its key in `codes`)."""
    order_codes: list[int] = field(default_factory=list)
    """Their codes, place by place."""

    def codes_of(self, result: Sequence[_RawElement]) -> list[int] | None:
        """Each element's code, in the answer's order; None when a series' labels do not decode.

        Place by place against the family's last answer first (`order`): Prometheus writes one query's series in
        the same order from cycle to cycle, and the family's queries name the same series, so an element is
        usually the series its place held last time, and comparing its label bytes with that series' (two `Raw`,
        one `memcmp`) costs a third of copying them out and looking them up by hash (~10 against ~47 ms a
        100,000-element answer). From the first place that differs (a pod came or went, another order), the rest
        are looked up as before, and this answer's order is kept for the next. The codes returned are the order's:
        read, never changed."""
        order = self.order
        same = 0
        for last, item in zip(order, result, strict=False):  # the shorter of the two
            if item.metric != last:
                break
            same += 1
        if same == len(result):
            if same < len(order):  # a shorter answer: the order is this one's
                self.order, self.order_codes = order[:same], self.order_codes[:same]
            return self.order_codes
        if (found := self.looked_up(result[same:])) is None:
            return None
        rest, raws = found
        codes = self.codes
        for raw, code in zip(raws, rest, strict=True):  # the dict keeps its first key object: this one replaces it,
            del codes[raw]  # so that the order's wrapper holds no second copy of the bytes
            codes[raw] = code
        self.order = [*order[:same], *map(msgspec.Raw, raws)]
        self.order_codes = [*self.order_codes[:same], *rest]
        return self.order_codes

    def looked_up(self, items: Iterable[_RawElement]) -> tuple[list[int], list[bytes]] | None:
        """Each element's code by its label bytes, learnt where the series is new, and those bytes; None when a
        series' labels do not decode."""
        codes: list[int] = []
        raws: list[bytes] = []
        known, learn = self.codes.get, self.learn
        for item in items:
            raw = bytes(item.metric)
            if (code := known(raw)) is None:
                try:
                    code = learn(raw, _LABELS_DECODER.decode(raw))
                except msgspec.DecodeError:
                    return None
            codes.append(code)
            raws.append(raw)
        return codes, raws

    def learn(self, raw: bytes, labels: Labels) -> int:
        """The code of a series not seen yet: the exact checks of `_column` (or `_geometry`), in their order."""
        namespace = labels.namespace
        pod, model = _pod_and_model(labels, dispatch=self.family is _Family.DISPATCH)
        if (problem := _label_problem(namespace, pod, model, self.wanted_pairs)) is not None:
            code = _REASON_CODE[problem]
        elif self.family is _Family.GEOMETRY and not self._shape(raw, labels):
            code = INVALID_LABEL
        else:
            found = self.index.number.get((namespace, pod))
            code = UNKNOWN_POD if found is None else found
        self.codes[raw] = code
        return code

    def _shape(self, raw: bytes, labels: Labels) -> bool:
        """GEOMETRY: keep the series' (num_gpu_blocks, block_size); whether both labels are counts."""
        blocks, size = _int_label(labels.num_gpu_blocks), _int_label(labels.block_size)
        if blocks is None or size is None:
            return False
        shape = (blocks, size)
        self.shapes[raw] = self.distinct.setdefault(shape, shape)  # a variant's pods share theirs: one tuple
        return True

    def renumber(self, index: PodIndex) -> None:
        """The same series by another index (pods came or went): a pod's number is its place among the index's
        sorted pods, so it is looked up again, in one pass; a pod the old index did not hold is forgotten
        (learnt again when it reports), and so is everything when the cache outgrows the index (`SPARE_SERIES`)."""
        codes = self.codes
        if len(codes) > 2 * len(index) + SPARE_SERIES:
            self.codes, self.shapes, self.distinct = {}, {}, {}
        else:
            # What each code becomes, at its own place: old number i at i, then -4 ... -1 (the four codes, last,
            # where negative indices fall). One pass of lookups and the dict rebuilt, both in C.
            renumbered = map(index.number.get, self.index.keys, repeat(UNKNOWN_POD))
            moved = [*renumbered, INVALID_LABEL, UNKNOWN_POD, UNKNOWN_MODEL, MISSING_LABEL]
            forget = [raw for raw, code in codes.items() if code == UNKNOWN_POD]
            self.codes = dict(zip(codes, map(moved.__getitem__, codes.values()), strict=True))
            for raw in forget:
                del self.codes[raw]
                self.shapes.pop(raw, None)
        self.index = index
        self.order, self.order_codes = [], []  # its codes were the old index's


class SeriesCache:
    """The per-pod answers' series, recognised by their labels' bytes from answer to answer and cycle to cycle.

    Why: a cycle's eight vLLM per-pod answers (`SERIES_CACHED`; 100,000 elements each at 10,000 VAs) name the
    same series, one a pod, and name them in the same bytes (the query's `by` labels, which Prometheus writes
    sorted); so does the next cycle's, and so do cache_config_info's and the dispatch rate's from cycle to cycle,
    each in labels of its own (`_Family`). `digest` decodes every element's labels into strings and looks the pod
    up by them, ~2.7 µs an element with the decoding (docs/benchmarks/scale.md, item 21); here that is done once
    a series, and an element costs a comparison of its label bytes with those of the series at its place in the
    family's last answer (`_Series.codes_of`), or, where that differs, a copy of them and one lookup.

    Exact: what a series' labels say is a function of their bytes (decoded by the same reading), the query's
    wanted models and the pod index, so the digest is the one `digest` makes, drops and their order included
    (tests/metrics/test_series_cache.py). A family's cache starts over when the wanted models change and is
    renumbered in one pass when the index does. A family holds 16–26 MB at 10,000 VAs (100,000 series; the
    geometry's with its counts).

    One thread at a time (the collector's digester)."""

    def __init__(self) -> None:
        self._series: dict[_Family, _Series] = {}

    def digest(self, query: Query, body: bytes, index: PodIndex) -> Digest | None:
        """The digest of one answer of `SERIES_CACHED`, as `digest(query, decode_answer(body, url), index)` makes
        it; None when this reading refuses the body or a series' labels (the typed path then reads what it can, or
        names the problem)."""
        try:
            result = _RAW_DECODER.decode(body).data.result
        except msgspec.DecodeError:  # e.g. Prometheus' `+Inf` as a value, or not an answer at all
            return None
        series = self._for(query, index)
        drops: Counter[str] = Counter()
        if series.family is _Family.GEOMETRY:  # the value is 1: what counts is in the labels (looked up by them)
            if (found := series.looked_up(result)) is None:
                return None
            out: dict[int, tuple[int, int]] = {}
            shape_of = series.shapes.__getitem__
            for code, raw in zip(*found, strict=True):
                if code < 0:
                    drops[_CODE_REASON[code]] += 1
                    continue
                shape = shape_of(raw)
                old = out.get(code)  # several series of one pod: the most blocks, the last block size
                out[code] = shape if old is None or shape[0] > old[0] else (old[0], shape[1])
            return Digest(query, geometry=out, dropped=drops)
        if (codes := series.codes_of(result)) is None:
            return None
        values = np.array([item.value.number for item in result], dtype=np.float64)
        at, samples = _usable(codes, values, _UPPER_BOUND.get(query.name, _INF), drops)
        dispatch = series.family is _Family.DISPATCH
        return Digest(query, column=_to_column(at, samples, len(index), dispatch=dispatch), dropped=drops)

    def _for(self, query: Query, index: PodIndex) -> _Series:
        family, wanted = _Family.of(query.name), query.models
        series = self._series.get(family)
        if series is None or (series.wanted is not wanted and series.wanted != wanted):
            series = self._series[family] = _Series(family, wanted, _wanted(query)[0], index)
        series.wanted = wanted  # the same models: a cycle's other answers then compare by identity
        if series.index is not index:
            series.renumber(index)
        return series


def _usable(
    codes: Sequence[int], values: FloatColumn, upper: float, drops: Counter[str]
) -> tuple[PodNumbers, FloatColumn]:
    """The elements that name a pod (code >= 0) with a value in [0, upper] (finite): their pod numbers and values,
    in the answer's order; each other one counted in `drops` by its code's reason, or its value's problem. The one
    value check of both per-pod paths, the series cache's and `_column`'s: over arrays, where a loop checked each
    element (callgrind: a cached answer's digest 12 % fewer instructions; item 27 of docs/benchmarks/scale.md).

    Example: codes (4, UNKNOWN_POD, 7, 9), values (0.5, 0.3, NaN, 2.0), upper 1 ⇒ pods (4,), values (0.5,);
    drops unknown-pod 1, nan 1, out-of-range 1."""
    at = np.fromiter(codes, np.intp, len(codes))
    named = at >= 0
    if not named.all():
        reasons, counts = np.unique(at[~named], return_counts=True)
        for code, count in zip(reasons.tolist(), counts.tolist(), strict=True):
            drops[_CODE_REASON[code]] += count
    usable = named & (values >= 0.0) & (values < _INF) & (values <= upper)  # NaN fails each comparison
    if np.count_nonzero(named) > np.count_nonzero(usable):
        for value in values[named & ~usable].tolist():
            drops[_value_problem(value)] += 1
    return at[usable], values[usable]


def _geometry(
    query: Query, result: Sequence[Element], index: PodIndex, drops: Counter[str]
) -> dict[int, tuple[int, int]]:
    """cache_config_info: the value is 1; the geometry is in the `num_gpu_blocks` / `block_size` labels.

    The same fast path as `_column` (a known pod by name, its namespace and model wanted), then the labels; the
    exact checks otherwise, in their order: missing label, unknown model, invalid label, unknown pod."""
    out: dict[int, tuple[int, int]] = {}
    wanted, wanted_in = _wanted(query)
    number, by_pod, namespaces = index.number.get, index.by_pod.get, index.namespaces
    ints: dict[str | None, int | None] = {}  # the label values repeat ("16", "30000"): parse each once
    last_namespace: str | None = None
    models: set[str] = set()
    last_labels: tuple[str | None, str | None] = (None, None)  # a variant's pods share their geometry
    last_geometry: tuple[int | None, int | None] = (None, None)
    for item in result:
        labels = item.metric
        namespace = labels.namespace
        pod = labels.pod or labels.pod_name
        model = labels.model_name
        if namespace != last_namespace:
            last_namespace, models = namespace, wanted_in.get(namespace, set())
        i = by_pod(pod, -1)
        fast = i >= 0 and namespaces[i] == namespace and model in models
        if not fast and _unlabelled_or_unwanted(namespace, pod, model, wanted, drops):
            continue
        raw_blocks, raw_size = labels.num_gpu_blocks, labels.block_size
        if raw_blocks != last_labels[0] or raw_size != last_labels[1]:
            if raw_blocks not in ints:
                ints[raw_blocks] = _int_label(raw_blocks)
            if raw_size not in ints:
                ints[raw_size] = _int_label(raw_size)
            last_labels, last_geometry = (raw_blocks, raw_size), (ints[raw_blocks], ints[raw_size])
        blocks, size = last_geometry
        if blocks is None or size is None:
            drops["invalid-label"] += 1
            continue
        if not fast:
            if (found := number((namespace, pod))) is None:
                drops["unknown-pod"] += 1
                continue
            i = found
        old = out.get(i)
        out[i] = (blocks if old is None or blocks > old[0] else old[0], size)
    return out


def _model_values(query: Query, result: Sequence[Element], drops: Counter[str]) -> dict[ModelKey, float]:
    epp = query.name is not QueryName.REQUEST_COUNT
    by_model_id: dict[str, list[ModelKey]] = {}
    for key in sorted(query.models, key=MODEL_ORDER):
        by_model_id.setdefault(key.model_id, []).append(key)
    out: dict[ModelKey, float] = {}
    for item in result:
        labels = item.metric
        model = labels.wva_model_id if epp else labels.model_name
        namespace = labels.namespace
        value = item.value.number
        if not model:
            drops["missing-label"] += 1
            continue
        if epp and not namespace:
            # EPP metrics carry no namespace of their own (GAIE #2309); without a scrape-target namespace
            # the queue applies to the model id in every namespace, as upstream's unfiltered query does.
            targets = by_model_id.get(model, [])
        else:
            key = ModelKey(namespace, model)
            targets = [key] if key in query.models else []
        if not targets:
            drops["unknown-model"] += 1
        elif not 0.0 <= value < _INF:
            drops[_value_problem(value)] += 1
        else:
            for key in targets:
                out[key] = out.get(key, 0.0) + value
    return out


def _histograms(query: Query, result: Sequence[Element], drops: Counter[str]) -> dict[ModelKey, LatencyHistogram]:
    """Bucket rates by model → one `LatencyHistogram` per model (sorted, coalesced, repaired by `from_pairs`).

    Example element: `{"metric": {"namespace": "ns", "model_name": "m", "le": "2.5"}, "value": [t, "9"]}`.
    """
    pairs: dict[ModelKey, list[tuple[float, float]]] = {}
    keys: dict[tuple[str, str], ModelKey | None] = {}  # one model's ~20 elements share their labels: parse once
    bounds: dict[str, float] = {}
    last_names: tuple[str, str] = ("", "")  # ... and mostly come one after the other: compared, not hashed
    known: ModelKey | None = None
    buckets: list[tuple[float, float]] = []  # the known model's, in `pairs` (a ModelKey hashes in Python: once)
    for item in result:
        labels = item.metric
        namespace, model, raw_le = labels.namespace, labels.model_name, labels.le
        value = item.value.number
        if not model or raw_le is None:
            drops["missing-label"] += 1
            continue
        if model != last_names[1] or namespace != last_names[0]:
            last_names = (namespace, model)
            if last_names not in keys:
                key = ModelKey(namespace, model)
                keys[last_names] = key if key in query.models else None
            known = keys[last_names]
            if known is not None:
                buckets = pairs.setdefault(known, [])
        if known is None:
            drops["unknown-model"] += 1
            continue
        if (le := bounds.get(raw_le)) is None:
            try:
                le = bounds[raw_le] = float(raw_le)
            except ValueError:
                le = bounds[raw_le] = math.nan
        if not le >= 0:  # NaN too
            drops["invalid-label"] += 1
        elif not 0.0 <= value < _INF:
            drops[_value_problem(value)] += 1
        else:
            buckets.append((le, value))
    out: dict[ModelKey, LatencyHistogram] = {}
    for key, model_buckets in pairs.items():
        if not model_buckets:
            continue  # every element of the model dropped: no histogram, and not an incomplete one
        if not any(le == _INF for le, _ in model_buckets):
            drops["incomplete-histogram"] += 1
            continue
        out[key] = LatencyHistogram.from_pairs(model_buckets)
    return out


def join(
    models: Sequence[ModelQuery],
    outcomes: Sequence[tuple[Query, Digest | SourceError]],
    index: PodIndex,
    *,
    duration_s: float = 0.0,
) -> Collection:
    """Join the digests (or errors) of one cycle's queries into a Collection. Pure: no I/O, no clock."""
    keys = frozenset(m.key for m in models)
    errors = tuple(f"{q.name}: {type(o).__name__}: {o}" for q, o in outcomes if isinstance(o, SourceError))
    if outcomes and len(errors) == len(outcomes):
        return Collection(
            models={key: ModelTraffic(key) for key in sorted(keys, key=MODEL_ORDER)},
            available=False,
            unavailable_models=keys,
            errors=errors,
            duration_s=duration_s,
        )
    unavailable = frozenset(m for q, o in outcomes if isinstance(o, SourceError) and q.essential for m in q.models)
    columns: dict[str, FloatColumn] = {}
    geometry: dict[int, tuple[int, int]] = {}
    traffic: dict[ModelKey, dict[str, float]] = {}
    latency: dict[ModelKey, dict[str, LatencyHistogram]] = {}
    latency_window_s = 0.0
    dropped: Counter[str] = Counter()
    for query, outcome in outcomes:
        if isinstance(outcome, SourceError):
            continue
        dropped.update(outcome.dropped)
        if outcome.column is not None:
            columns[_POD_FIELD[query.name]] = outcome.column
        if outcome.geometry is not None:
            geometry.update(outcome.geometry)
        if outcome.traffic is not None:
            for key, value in outcome.traffic.items():
                traffic.setdefault(key, {})[_MODEL_FIELD[query.name]] = value
        if outcome.histograms is not None:
            latency_window_s = query.window_s or latency_window_s
            for key, histogram in outcome.histograms.items():
                latency.setdefault(key, {})[_HISTOGRAM_FIELD[query.name]] = histogram
    return Collection(
        pods=_pods(columns, geometry, index),
        models={
            key: ModelTraffic(
                key,
                **traffic.get(key, {}),
                latency=ModelLatency(latency_window_s, **latency[key]) if key in latency else None,
            )
            for key in sorted(keys, key=MODEL_ORDER)
        },
        available=True,
        unavailable_models=unavailable,
        dropped_samples=dict(sorted(dropped.items())),
        errors=errors,
        duration_s=duration_s,
    )


_NO_GEOMETRY: tuple[None, None] = (None, None)
_FIELDS = (
    "kv_cache_usage",
    "queue_length",
    "running_requests",
    "avg_input_tokens",
    "avg_output_tokens",
    "prefix_cache_hit_rate",
    "arrival_rate_rps",
    "avg_ttft_s",
    "avg_itl_s",
)


def _pods(
    columns: Mapping[str, FloatColumn], geometry: Mapping[int, tuple[int, int]], index: PodIndex
) -> tuple[PodMetrics, ...]:
    """A PodMetrics for every pod with a usable sample in any answer, in (namespace, pod) order, built column
    by column (`pod_metrics_from_columns`: 100,000 pods a cycle at 10,000 VAs)."""
    present = np.zeros(len(index), dtype=bool)
    for column in columns.values():
        present |= ~np.isnan(column)
    present[list(geometry)] = True
    numbers = np.flatnonzero(present)
    count = len(numbers)

    def values(name: str) -> list[float | None]:
        column = columns.get(name)
        if column is None:
            return [None] * count
        return _with_none(column[numbers])

    by_field: dict[str, Sequence[Any]] = {name: values(name) for name in _FIELDS}
    pod_numbers = numbers.tolist()
    shape = geometry.get
    blocks, sizes = zip(*[shape(i, _NO_GEOMETRY) for i in pod_numbers], strict=True) if count else ((), ())
    usage = columns.get("kv_cache_usage")
    by_field["tokens_in_use"] = [None] * count if usage is None else _tokens_in_use(usage[numbers], blocks, sizes)
    by_field["namespace"] = list(map(index.namespaces.__getitem__, pod_numbers))  # a C loop over the numbers
    by_field["pod"] = list(map(index.pods.__getitem__, pod_numbers))
    by_field["variant"] = list(map(index.variants.__getitem__, pod_numbers))
    by_field["num_gpu_blocks"], by_field["block_size"] = blocks, sizes
    by_field["max_batch_size"] = [None] * count
    return pod_metrics_from_columns(by_field)


def _with_none(picked: FloatColumn) -> list[float | None]:
    """The column's values as floats, None where NaN (no usable sample)."""
    out: list[float | None] = picked.tolist()
    for at in np.flatnonzero(np.isnan(picked)).tolist():
        out[at] = None
    return out


def _tokens_in_use(usage: FloatColumn, blocks: Sequence[int | None], sizes: Sequence[int | None]) -> list[float | None]:
    """Each pod's KV tokens in use: its usage (a fraction, NaN = none) of its blocks × block size, rounded half to
    even and kept in [0, capacity]; None without usage or geometry. On arrays, the per-pod expression

        float(min(max(round(usage * (b * s)), 0), b * s))

    to the bit: `b * s` < 2**62 (`MAX_GEOMETRY_LABEL`) becomes the float64 Python's `usage * (b * s)` makes of it,
    `np.rint` rounds half to even as `round` does, and clipping at that float cuts where `min` at the exact int
    does (a float above or below the int is above or below its nearest float). Example: usage 0.4685 of 30,000
    blocks of 16 -> rint(224,880.0) = 224,880.0; usage 0.5 of 3 blocks of 1 -> rint(1.5) = 2.0.
    """
    capacity = np.array(
        [-1.0 if b is None or s is None else b * s for b, s in zip(blocks, sizes, strict=True)], dtype=np.float64
    )
    tokens = np.clip(np.rint(usage * capacity), 0.0, capacity)
    tokens[capacity < 0] = np.nan  # no geometry (no usage: NaN already)
    return _with_none(tokens)


def assemble(
    models: Sequence[ModelQuery],
    outcomes: Sequence[tuple[Query, Sequence[Any] | SourceError]],
    pod_variants: Mapping[PodKey, str],
    *,
    duration_s: float = 0.0,
) -> Collection:
    """`digest` each already decoded answer (a malformed one becomes that query's QueryError), then `join`."""
    index = PodIndex.of(pod_variants)
    digested: list[tuple[Query, Digest | SourceError]] = []
    for query, outcome in outcomes:
        if isinstance(outcome, SourceError):
            digested.append((query, outcome))
            continue
        try:
            digested.append((query, digest(query, elements(outcome), index)))
        except QueryError as e:
            digested.append((query, e))
    return join(models, digested, index, duration_s=duration_s)
