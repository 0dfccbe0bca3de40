"""Binding a TrainJob to Tether: the label the admission webhook looks for."""

from __future__ import annotations

from typing import Any, Final, Mapping

from . import names

#: The labels that bind a TrainJob, e.g. Kubeflow SDK's
#: ``TrainerClient().train(..., options=[Labels(tether.BIND_LABELS)])``.
BIND_LABELS: Final[Mapping[str, str]] = {names.BIND_LABEL: names.BIND_VALUE}


def bind(trainjob: dict[str, Any]) -> dict[str, Any]:
    """Adds the bind label to a TrainJob manifest (a dict, as given to the
    Kubernetes client) and returns the same dict. Its other labels stay."""
    if not isinstance(trainjob, dict):
        raise TypeError(f"bind takes a TrainJob manifest as a dict, not {type(trainjob).__name__}")
    kind = trainjob.get("kind")
    if kind not in (None, "TrainJob"):
        raise ValueError(f"bind takes a TrainJob, not a {kind}: only TrainJobs are bound (docs/orchestrator.md)")
    meta = trainjob.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    labels.update(BIND_LABELS)
    meta["labels"] = labels
    return trainjob
