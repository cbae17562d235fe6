"""A small kustomize renderer for the subset deploy/kubernetes uses, so that tests validate the
manifests an operator would apply without a kustomize binary (nothing is downloaded at test time).

Supported: `resources` (files, or directories holding a kustomization.yaml), `patches` with a
`path` to a strategic-merge patch (matched by apiVersion, kind and name), `labels` with
`includeSelectors: false` (metadata labels only) and `namespace`. Any other field is refused, so
a kustomization can never use a feature this renderer would silently ignore."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "patches", "labels", "namespace"}
# Lists that strategic merge patches merge by a key instead of replacing (Kubernetes patchMergeKey).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "ports": "containerPort",
              "volumes": "name", "volumeMounts": "mountPath"}


class KustomizeError(ValueError):
    pass


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc.get("apiVersion", ""), doc.get("kind", ""), doc.get("metadata", {}).get("name", "")


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = strategic_merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            for i, existing in enumerate(merged_list):
                if isinstance(existing, dict) and existing.get(key) == item.get(key):
                    merged_list[i] = strategic_merge(existing, item, None)
                    break
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(patch)


def _load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents `kustomize build directory` would output (order aside)."""
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    spec = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(spec) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{kfile}: fields this renderer does not support: {sorted(unknown)}")
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            docs.extend(render(target))
        elif target.is_file():
            docs.extend(_load_docs(target))
        else:
            raise KustomizeError(f"{kfile}: resource {entry!r} does not exist")
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        if _key(doc) in seen:
            raise KustomizeError(f"{kfile}: duplicate resource {_key(doc)}")
        seen.add(_key(doc))
    for patch_entry in spec.get("patches", []):
        if set(patch_entry) != {"path"}:
            raise KustomizeError(f"{kfile}: only `patches: - path: FILE` is supported, got {patch_entry}")
        for patch in _load_docs(directory / patch_entry["path"]):
            matches = [i for i, d in enumerate(docs) if _key(d) == _key(patch)]
            if len(matches) != 1:
                raise KustomizeError(f"{kfile}: patch {patch_entry['path']} matches {len(matches)} resources")
            docs[matches[0]] = strategic_merge(docs[matches[0]], patch)
    for label_entry in spec.get("labels", []):
        if label_entry.get("includeSelectors", False) or label_entry.get("includeTemplates", False):
            raise KustomizeError(f"{kfile}: only labels with includeSelectors/includeTemplates false are supported")
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(label_entry["pairs"])
    if "namespace" in spec:
        for doc in docs:
            doc.setdefault("metadata", {})["namespace"] = spec["namespace"]
    return docs
