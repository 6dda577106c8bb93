"""`wva-adapter check-config`: validate VariantAutoscaling manifests and WVA ConfigMaps before applying them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter.config.configmaps import KNOWN_CONFIGMAPS, parse_configmap
from adapter.config.files import MAX_MANIFEST_BYTES, read_bounded
from adapter.config.names import LABEL_RULE, is_dns1123_label
from adapter.config.safeload import InputError, excerpt, load_yaml_all
from adapter.config.va import parse_va
from adapter.domain.errors import ManifestError
from adapter.domain.text import plain

_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}", re.ASCII)
"""What Kubernetes accepts as a ConfigMap data key (IsConfigMapKey)."""


@dataclass
class Report:
    ok: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def check_files(paths: list[Path]) -> Report:
    report = Report()
    for path in paths:
        try:
            docs = load_yaml_all(
                read_bounded(path, what="", max_bytes=MAX_MANIFEST_BYTES), what=str(path), max_bytes=MAX_MANIFEST_BYTES
            )
        except InputError as exc:
            report.errors.append(str(exc))
            continue
        for index, doc in enumerate(docs):
            if doc is None:
                continue
            where = f"{path}#{index + 1}"
            try:
                _check_doc(report, where, doc)
            except Exception as exc:  # a checker bug must never become a traceback for the user
                report.errors.append(f"{where}: could not be checked ({type(exc).__name__}: {excerpt(str(exc))})")
    return report


def _check_doc(report: Report, where: str, doc: Any) -> None:
    if not isinstance(doc, dict):
        report.errors.append(f"{where}: a manifest must be a mapping, got {type(doc).__name__}")
        return
    kind = doc.get("kind")
    raw_metadata = doc.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    name = metadata.get("name", "?")
    if kind == "VariantAutoscaling":
        try:
            va = parse_va(doc)
        except ManifestError as exc:
            report.errors.append(f"{where}: {exc}")
            return
        report.ok.append(f"{where}: VariantAutoscaling {va.key} (model {va.spec.model_id})")
    elif kind == "ConfigMap" and name in KNOWN_CONFIGMAPS:
        data = doc.get("data") or {}
        if not isinstance(data, dict):
            report.errors.append(f"{where}: ConfigMap {name}.data must be a mapping")
            return
        namespace = metadata.get("namespace", "default")
        if not isinstance(namespace, str) or not is_dns1123_label(namespace):
            report.errors.append(f"{where}: ConfigMap {name}.metadata.namespace: {excerpt(namespace)} — {LABEL_RULE}")
            return
        bad_keys = [key for key in data if not isinstance(key, str) or not _CONFIGMAP_KEY.fullmatch(key)]
        if bad_keys:
            report.errors.append(
                f"{where}: ConfigMap {name}.data: key {excerpt(bad_keys[0])} is not a ConfigMap key "
                "(letters, digits, '-', '_' or '.', at most 253 characters)"
            )
            return
        parsed = parse_configmap(namespace=namespace, name=name, data=data)
        if parsed.errors:
            report.errors.extend(f"{where}: {message}" for message in parsed.errors)
        else:
            report.ok.append(f"{where}: ConfigMap {name} ({len(parsed.entries)} entries)")
    else:
        shown_kind = plain(kind, 63) if isinstance(kind, str) and kind else "unknown kind"
        shown_name = plain(name, 80) if isinstance(name, str) else excerpt(name)
        report.skipped.append(f"{where}: {shown_kind} {shown_name} is not a VA or WVA ConfigMap; not checked")
