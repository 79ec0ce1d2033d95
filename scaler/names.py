"""Metric names the scaler hands to KEDA, and matching the names KEDA sends back.

KEDA builds the HPA's external metric name as `s<triggerIndex>-<our name>` and the HPA API refuses
names that are not valid path segments (kedacore/keda pkg/scalers/scaler.go
GenerateMetricNameWithIndex; kubernetes pkg/apis/autoscaling/validation validateMetricIdentifier).
Model names such as `meta-llama/Llama-3.1-8B-Instruct` contain `/` and `.`, so they are folded to
`[a-z0-9-]`; folding loses information (`Llama-3.1` and `llama-3-1` collide), so a short hash of the
exact model name keeps distinct models distinct. The name is a pure function of the model name:
every scaler pod and every restart produces the same one.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "llm"
#: Longest slug kept from the model name; the whole name stays well under 63 characters.
MAX_SLUG = 48
HASH_CHARS = 6
_UNSAFE = re.compile(r"[^a-z0-9]+")
_KEDA_INDEX = re.compile(r"^s\d+-")


def model_slug(model: str) -> str:
    """`meta-llama/Llama-3.1-8B-Instruct` -> `meta-llama-llama-3-1-8b-instruct` (empty -> `model`)."""
    slug = _UNSAFE.sub("-", model.lower()).strip("-")[:MAX_SLUG].rstrip("-")
    return slug or "model"


def metric_name(model: str) -> str:
    """The metric name for a model: `llm-<slug>-<first 6 hex of sha256(model)>`."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{PREFIX}-{model_slug(model)}-{digest}"


def matches(requested: str, ours: str) -> bool:
    """Is `requested` (GetMetricsRequest.metricName) our metric?

    Case-insensitive (KEDA <= v2.11 could lower-case it on the HPA path, kedacore/keda #4954), and
    tolerant of KEDA's `sX-` index prefix (stripped by KEDA since v2.7.0, #2640). An empty name
    means "all metrics" and matches.
    """
    if not requested:
        return True
    folded = requested.casefold()
    return folded == ours.casefold() or _KEDA_INDEX.sub("", folded, count=1) == ours.casefold()
