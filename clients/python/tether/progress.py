"""Training progress of a bound job: the binding's status.progress, with the
TrainJob's status.trainerStatus (Kubeflow Trainer v2.3) where it says more."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Optional

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Progress:
    """Progress as the trainer reported it; None where it reported nothing."""

    step: Optional[int] = None
    epoch: Optional[float] = None
    loss: Optional[float] = None
    #: Fraction done, 0 to 1 (the trainer's, or trainerStatus.progressPercentage / 100).
    fraction: Optional[float] = None
    #: Time left: trainerStatus.estimatedRemainingSeconds, else from the
    #: median step interval and the total the fraction implies (step / fraction).
    eta: Optional[timedelta] = None
    #: Median time per step over the recent steps (status.progress.stepInterval).
    step_interval: Optional[timedelta] = None
    #: When the trainer last wrote progress.
    updated: Optional[datetime] = None


def parse_go_duration(s: str) -> Optional[timedelta]:
    """A Go duration string ("1m30s", "2.5s", "150ms") as a timedelta."""
    if not s:
        return None
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    if body == "0":
        return timedelta(0)
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    return timedelta(seconds=sign * sum(float(n) * _UNIT[u] for n, u in parts))


def _float(v: Any) -> Optional[float]:
    try:
        return None if v in (None, "") else float(v)
    except (TypeError, ValueError):
        return None


def _time(v: Any) -> Optional[datetime]:
    if not v:
        return None
    try:
        return datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return None


def from_status(binding: dict[str, Any], trainjob: Optional[dict[str, Any]] = None) -> Progress:
    """The Progress of a binding (and its TrainJob, when given)."""
    p = (binding.get("status") or {}).get("progress") or {}
    ts = ((trainjob or {}).get("status") or {}).get("trainerStatus") or {}
    metrics = {m.get("name"): m.get("value") for m in ts.get("metrics") or [] if isinstance(m, dict)}
    step = p.get("step")
    metric_step = _float(metrics.get("step"))
    if step is None and metric_step is not None:
        step = int(metric_step)
    fraction = _float(p.get("fraction"))
    percent = _float(ts.get("progressPercentage"))
    if fraction is None and percent is not None:
        fraction = percent / 100.0
    interval = parse_go_duration(p.get("stepInterval", ""))
    eta: Optional[timedelta] = None
    if ts.get("estimatedRemainingSeconds") is not None:
        eta = timedelta(seconds=float(ts["estimatedRemainingSeconds"]))
    elif interval is not None and step and fraction:
        total = step / fraction
        eta = interval * max(0.0, total - step)
    return Progress(
        step=int(step) if step is not None else None,
        epoch=_float(p.get("epoch")) if p.get("epoch") else _float(metrics.get("epoch")),
        loss=_float(p.get("loss")) if p.get("loss") else _float(metrics.get("loss")),
        fraction=fraction, eta=eta, step_interval=interval,
        updated=_time(p.get("updatedTime")) or _time(ts.get("lastUpdatedTime")),
    )
