"""Tether's client for orchestrators (docs/orchestrator.md): bind Kubeflow
TrainJobs, read and watch their WorkerBindings, wait on phases and
conditions, follow progress, send flush/drain, cancel, and download
verified artifacts and archived logs with the caller's own credentials.

    import tether
    c = tether.Client()
    c.wait("team-a", "job-1", condition="Ready", timeout=600)
    c.artifacts.download("team-a", "job-1", "model.pt", "./model.pt")
"""

from . import names
from ._version import __version__
from .artifacts import Artifact, Artifacts
from .bind import BIND_LABELS, bind
from .cancel import (STOP_DEACTIVATE_WORKLOAD, STOP_DELETE_TRAINJOB, STOP_SUSPEND_TRAINJOB, CancelResult, Stop,
                     cancel)
from .client import Client, WatchEvent, final
from .errors import (ArtifactDigestMismatch, ArtifactNotFound, BindingDeleted, CancelFlushError, CommandFailed,
                     ConditionError, Forbidden, LogNotFound, ManifestDigestMismatch, NotBound, PhaseError,
                     ReadAPINotInstalled, ReadEndpointConfig, ReadError, ReadForbidden, ReadRedirected,
                     StoreUnavailable, TetherError, Timeout)
from .kube import APIError
from .names import CANCEL, DRAIN, FLUSH
from .progress import Progress

__all__ = [
    "__version__", "names", "Client", "WatchEvent", "final", "BIND_LABELS", "bind", "Progress",
    "Artifact", "Artifacts", "CancelResult", "Stop", "cancel",
    "STOP_DEACTIVATE_WORKLOAD", "STOP_SUSPEND_TRAINJOB", "STOP_DELETE_TRAINJOB", "FLUSH", "DRAIN", "CANCEL",
    "TetherError", "NotBound", "BindingDeleted", "Timeout", "PhaseError", "ConditionError", "CommandFailed",
    "Forbidden", "CancelFlushError", "ManifestDigestMismatch", "ArtifactDigestMismatch", "ArtifactNotFound",
    "LogNotFound", "ReadError", "ReadAPINotInstalled", "ReadForbidden", "StoreUnavailable", "ReadRedirected",
    "ReadEndpointConfig", "APIError",
]
