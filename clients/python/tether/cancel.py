"""Cancel, as pkg/client/cancel.go does it: a server-side dry run of the
stop first (Forbidden naming verb, resource and namespace, and nothing
sent), the cancel command (every node runs a final flush) and its
acknowledgement within a timeout, then the stop with the caller's own
credentials: the Kueue Workload deactivated (spec.active=false), else the
TrainJob suspended (spec.suspend=true), or with delete=True the TrainJob
deleted. A flush that failed or timed out still stops the job and raises
CancelFlushError naming the files not verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from . import errors, names
from .kube import APIError, Obj, trainjob_path

if TYPE_CHECKING:
    from .client import Client

#: How Cancel stops a job.
STOP_DEACTIVATE_WORKLOAD = "DeactivateWorkload"
STOP_SUSPEND_TRAINJOB = "SuspendTrainJob"
STOP_DELETE_TRAINJOB = "DeleteTrainJob"

TRAINJOBS = f"{names.TRAINJOB_PLURAL}.{names.TRAINJOB_GROUP}"
WORKLOADS = f"workloads.{names.KUEUE_GROUP}"


@dataclass
class Stop:
    """How the job is stopped, and the permission it needs (verb on resource in namespace)."""

    action: str
    verb: str
    resource: str
    namespace: str
    name: str
    #: The object's API path.
    path: str = field(default="", repr=False)
    uid: str = field(default="", repr=False)

    def __str__(self) -> str:
        if self.action == STOP_DEACTIVATE_WORKLOAD:
            return (f"Kueue Workload {self.namespace}/{self.name} deactivated (spec.active=false): "
                    f"Kueue evicts it and frees its quota")
        if self.action == STOP_SUSPEND_TRAINJOB:
            return f"TrainJob {self.namespace}/{self.name} suspended (spec.suspend=true)"
        return f"TrainJob {self.namespace}/{self.name} deleted"


@dataclass
class CancelResult:
    """What cancel did."""

    command_id: str
    stop: Stop
    #: The command's status once every node acknowledged it (None when the flush failed or timed out).
    command: Optional[dict[str, Any]] = None
    flush_error: Optional[Exception] = None
    #: Up to 10 files the binding does not list as verified (when the flush failed).
    unverified: list[str] = field(default_factory=list)
    unverified_count: int = 0
    unverified_summary: str = ""


def cancel(client: "Client", namespace: str, name: str, timeout: float = 120.0, delete: bool = False) -> CancelResult:
    """Stops the trainer of binding namespace/name (see the module's doc).
    A binding already final raises PhaseError and nothing is stopped."""
    wb = client.get(namespace, name)
    st = wb.get("status") or {}
    from .client import final
    if final(st.get("phase", "")):
        raise errors.PhaseError(f"{namespace}/{name}", st.get("phase", ""), st.get("reason", ""), st.get("message", ""),
                                before="cancel: a finished job has nothing to flush or stop")
    stop = plan_stop(client, namespace, wb.get("spec", {}).get("trainJobName") or name, delete)
    apply_stop(client, stop, dry_run=True)
    res = CancelResult(command_id=client.send(namespace, name, names.CANCEL), stop=stop)
    try:
        res.command = client.wait_command(namespace, name, res.command_id, timeout)
    except errors.Timeout:
        res.flush_error = errors.TetherError(
            f"no acknowledgement of cancel {res.command_id} from every node within {timeout:g}s")
    except (errors.CommandFailed, errors.PhaseError, errors.BindingDeleted) as e:
        res.flush_error = e
    try:
        apply_stop(client, stop, dry_run=False)
    except errors.TetherError as e:
        outcome = "acknowledged" if res.flush_error is None else str(res.flush_error)
        raise errors.TetherError(f"cancel {res.command_id} sent (flush: {outcome}), but stopping the job failed: {e}") from e
    if res.flush_error is None:
        return res
    try:
        res.unverified, res.unverified_count, res.unverified_summary = unverified_files(client.get(namespace, name))
    except errors.TetherError:
        pass
    raise errors.CancelFlushError(f"{namespace}/{name}", res)


def unverified_files(wb: Obj) -> tuple[list[str], int, str]:
    """What the binding does not list as verified: the worker's missing
    files, else its nodes', and which nodes' manifests are not verified."""
    st = wb.get("status") or {}
    a = st.get("artifacts") or {}
    files: list[str] = []
    count = 0
    if a.get("missingCount", 0) > 0:
        files, count = list(a.get("missing") or []), int(a["missingCount"])
    else:
        for n in st.get("nodes") or []:
            na = n.get("artifacts") or {}
            files += na.get("missing") or []
            count += int(na.get("missingCount", 0))
    parts = []
    for n in st.get("nodes") or []:
        na = n.get("artifacts") or {}
        if not na.get("verified"):
            why = na.get("lastError") or ("no manifest uploaded" if not na.get("manifest") else "manifest not verified")
            parts.append(f"node {n.get('rank', 0)}: {why}")
    summary = "not verified: " + "; ".join(parts) if parts else ""
    return files[:10], count, summary


def plan_stop(client: "Client", namespace: str, name: str, delete: bool) -> Stop:
    """How to stop TrainJob namespace/name: delete it, or deactivate its
    Kueue Workload (found by Kueue's job-uid label or its ownerReference),
    or suspend it when Kueue manages it not."""
    path = trainjob_path(namespace, name)
    try:
        tj = client.kube.request("GET", path)
    except APIError as e:
        if e.status == 403:
            raise errors.Forbidden("get", TRAINJOBS, namespace, name, str(e)) from None
        raise errors.TetherError(f"reading TrainJob {namespace}/{name} to stop it: {e}") from None
    uid = tj.get("metadata", {}).get("uid", "")
    if delete:
        return Stop(STOP_DELETE_TRAINJOB, "delete", TRAINJOBS, namespace, name, path, uid)
    suspend = Stop(STOP_SUSPEND_TRAINJOB, "patch", TRAINJOBS, namespace, name, path, uid)
    version = kueue_version(client)
    if version is None:
        return suspend  # no Kueue in this cluster
    wl_base = f"/apis/{names.KUEUE_GROUP}/{version}/namespaces/{namespace}/workloads"
    try:
        workloads = client.kube.request("GET", wl_base).get("items") or []
    except APIError as e:
        if e.status == 403:
            raise errors.Forbidden("list", WORKLOADS, namespace, f"to find the Workload of TrainJob {name}", str(e)) from None
        raise errors.TetherError(f"finding the Kueue Workload of TrainJob {namespace}/{name}: {e}") from None
    for wl in workloads:
        meta = wl.get("metadata", {})
        owned = (meta.get("labels") or {}).get(names.KUEUE_JOB_UID_LABEL) == uid or \
            any(o.get("uid") == uid for o in meta.get("ownerReferences") or [])
        if owned:
            return Stop(STOP_DEACTIVATE_WORKLOAD, "patch", WORKLOADS, namespace, meta["name"],
                        f"{wl_base}/{meta['name']}", meta.get("uid", ""))
    queue = (tj.get("metadata", {}).get("labels") or {}).get(names.KUEUE_QUEUE_LABEL)
    if queue:
        # Suspending it would not hold: Kueue unsuspends what it admits.
        raise errors.TetherError(f"TrainJob {namespace}/{name} is queued in Kueue ({names.KUEUE_QUEUE_LABEL}={queue}) "
                                 f"but has no Workload yet; retry once Kueue created it")
    return suspend


def kueue_version(client: "Client") -> Optional[str]:
    """The Workload API version the API server prefers, or None without Kueue."""
    try:
        group = client.kube.request("GET", f"/apis/{names.KUEUE_GROUP}")
    except APIError as e:
        if e.status == 404:
            return None
        raise errors.TetherError(f"looking up Kueue's Workload API: {e}") from None
    return str((group.get("preferredVersion") or {}).get("version")) or None


def apply_stop(client: "Client", s: Stop, dry_run: bool) -> None:
    """Stops the job, or with dry_run has the API server check (RBAC,
    admission) that the caller may, changing nothing."""
    query = [("dryRun", "All")] if dry_run else []
    try:
        if s.action == STOP_DEACTIVATE_WORKLOAD:
            client.kube.request("PATCH", s.path, query, {"spec": {"active": False}}, "application/merge-patch+json")
        elif s.action == STOP_SUSPEND_TRAINJOB:
            client.kube.request("PATCH", s.path, query, {"spec": {"suspend": True}}, "application/merge-patch+json")
        else:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                    "preconditions": {"uid": s.uid}}
            try:
                client.kube.request("DELETE", s.path, query, body)
            except APIError as e:
                if dry_run or e.status != 404:
                    raise
    except APIError as e:
        if dry_run and e.status == 403:
            raise errors.Forbidden(s.verb, s.resource, s.namespace, s.name, str(e)) from None
        what = f"{s.verb} {s.resource} {s.namespace}/{s.name}"
        if dry_run:
            what = "checking (dry run) that the caller may " + what
        raise errors.TetherError(f"{what}: {e}") from None
