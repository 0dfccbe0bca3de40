"""The Tether client for orchestrators: the verbs of Tether's Go client
(pkg/client) with the same semantics and errors."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, List, Optional

from . import errors, names
from .kube import APIError, Kube, bindings_path, trainjob_path
from .progress import Progress, from_status
from .reads import APIServerReader, Body, ServiceReader, token_of

if TYPE_CHECKING:
    from .artifacts import Artifacts
    from .cancel import CancelResult

Binding = dict[str, Any]
OnChange = Callable[[Binding], None]

#: How long a single watch request runs before it is renewed (seconds).
WATCH_WINDOW = 300


def final(phase: str) -> bool:
    """Whether a binding's phase is final: Succeeded or Failed. Only
    Failed/Cancelled is ever left, by a cancelled job that is resumed."""
    return phase in (names.PHASE_SUCCEEDED, names.PHASE_FAILED)


@dataclass(frozen=True)
class WatchEvent:
    """A change of a binding: type is ADDED, MODIFIED or DELETED (after a
    watch expired and was re-listed, the listed bindings come as MODIFIED)."""

    type: str
    binding: Binding

    @property
    def resource_version(self) -> str:
        return str(self.binding.get("metadata", {}).get("resourceVersion", ""))


def _status(b: Binding) -> dict[str, Any]:
    return b.get("status") or {}


class Client:
    """Reads and commands bound jobs with the caller's credentials.

    kubeconfig/context: the kubeconfig to use (default: $KUBECONFIG or
    ~/.kube/config, else the pod's ServiceAccount in-cluster). api_client: a
    ready kubernetes.client.ApiClient instead. read_url: the binding
    Service's base URL (https://tether-control-plane.tether-system.svc:8443)
    for callers inside the cluster, with read_ca (the control plane's CA
    file) and read_server_name (the name its certificate carries when
    read_url reaches it by another); without it, reads go through the API
    server's aggregated read API.
    """

    def __init__(self, kubeconfig: Optional[str] = None, context: Optional[str] = None, *,
                 api_client: Any = None, read_url: Optional[str] = None, read_ca: Optional[str] = None,
                 read_server_name: Optional[str] = None) -> None:
        if api_client is None:
            api_client = _load_api_client(kubeconfig, context)
        self.api_client = api_client
        self.kube = Kube(api_client)
        self.reader: APIServerReader | ServiceReader
        if read_url:
            self.reader = ServiceReader(read_url, token_of(api_client), read_ca, read_server_name)
        else:
            self.reader = APIServerReader(api_client)
        from .artifacts import Artifacts
        self._artifacts = Artifacts(self)

    @property
    def artifacts(self) -> "Artifacts":
        """Artifact reads: ``client.artifacts.list(...)``, ``client.artifacts.download(...)``."""
        return self._artifacts

    # Reads of bindings.

    def get(self, namespace: str, name: str) -> Binding:
        """The WorkerBinding of TrainJob namespace/name (a binding has its
        TrainJob's name), as a dict. NotBound when there is none."""
        try:
            return self.kube.request("GET", bindings_path(namespace, name))
        except APIError as e:
            if e.status == 404:
                raise errors.NotBound(namespace, name) from None
            raise

    def list(self, namespace: str) -> List[Binding]:
        """The WorkerBindings of namespace."""
        return [b for b in self.kube.request("GET", bindings_path(namespace)).get("items") or []]

    def watch(self, namespace: str, name: Optional[str] = None, resource_version: Optional[str] = None,
              timeout: Optional[float] = None) -> Iterator[WatchEvent]:
        """Changes of the bindings of namespace (of name only, if given).

        From resource_version on when given (resume where an earlier watch
        stopped: WatchEvent.resource_version), else starting with the current
        bindings as ADDED. Watches the API server ends are renewed from the
        last version seen; a watch that expired (410 Gone) is re-listed, the
        listed bindings yielded as MODIFIED and the vanished as DELETED.
        Ends after timeout seconds (None: never)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        rv = resource_version
        known: dict[str, Binding] = {}
        while deadline is None or time.monotonic() < deadline:
            window = WATCH_WINDOW if deadline is None else max(1, min(WATCH_WINDOW, int(deadline - time.monotonic() + 0.999)))
            query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(window))]
            if name:
                query.append(("fieldSelector", "metadata.name=" + name))
            if rv:
                query.append(("resourceVersion", rv))
            expired = False
            try:
                for ev in self.kube.stream_lines(bindings_path(namespace), query, window):
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "ERROR":
                        if obj.get("code") == 410:
                            expired = True
                            break
                        raise APIError(int(obj.get("code") or 0), obj.get("reason", ""), obj.get("message", ""), obj)
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if typ == "BOOKMARK":
                        continue
                    key = obj.get("metadata", {}).get("name", "")
                    if typ == "DELETED":
                        known.pop(key, None)
                    else:
                        known[key] = obj
                    yield WatchEvent(str(typ), obj)
            except APIError as e:
                if e.status != 410:
                    raise
                expired = True
            if expired:
                rv = yield from self._relist(namespace, name, known)

    def _relist(self, namespace: str, name: Optional[str],
                known: dict[str, Binding]) -> Generator[WatchEvent, None, str]:
        query = [("fieldSelector", "metadata.name=" + name)] if name else []
        lst = self.kube.request("GET", bindings_path(namespace), query)
        seen = set()
        for item in lst.get("items") or []:
            key = item.get("metadata", {}).get("name", "")
            seen.add(key)
            known[key] = item
            yield WatchEvent("MODIFIED", item)
        for key in [k for k in known if k not in seen]:
            yield WatchEvent("DELETED", known.pop(key))
        return str(lst.get("metadata", {}).get("resourceVersion", ""))

    # Waits.

    def wait_until(self, namespace: str, name: str, done: Callable[[Binding], bool], what: str,
                   timeout: Optional[float] = None, on_change: Optional[OnChange] = None) -> Binding:
        """Watches binding namespace/name until done(binding) is true (or
        raises) and returns the binding. It reads the binding first, so a
        condition already met returns at once; a binding that does not exist
        yet is waited for. on_change is called with every new version of the
        binding. Timeout after timeout seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = ""
        wb: Optional[Binding] = None

        def seen(b: Binding) -> bool:
            nonlocal last, wb
            wb = b
            rv = b.get("metadata", {}).get("resourceVersion", "")
            if on_change is not None and rv != last:
                on_change(b)
            last = rv
            return done(b)

        try:
            if seen(self.get(namespace, name)):
                assert wb is not None
                return wb
        except errors.NotBound:
            pass
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        for ev in self.watch(namespace, name, resource_version=last or None, timeout=remaining):
            if ev.type == "DELETED":
                raise errors.BindingDeleted(namespace, name)
            if seen(ev.binding):
                return ev.binding
        phase = _status(wb).get("phase", "") if wb is not None else ""
        raise errors.Timeout(f"{namespace}/{name}", what, timeout or 0.0, phase, exists=wb is not None)

    def wait(self, namespace: str, name: str, *, condition: Optional[str] = None, phase: Optional[str] = None,
             timeout: Optional[float] = None, on_change: Optional[OnChange] = None) -> Binding:
        """Waits until binding namespace/name is in phase (e.g. "Succeeded")
        or has condition ("Ready" for Ready=True, or "TYPE=STATUS", status
        compared ignoring case) and returns it; exactly one of the two.

        Ends early, as pkg/client's WaitFor and WaitCondition do: a binding
        that ends in another final phase raises PhaseError; once final, an
        outcome condition (names.OUTCOME_CONDITION_TYPES) not met raises
        ConditionError. Other conditions are waited for until timeout
        (Timeout). on_change(binding) is called with every new version."""
        if (condition is None) == (phase is None):
            raise ValueError("wait takes exactly one of condition= (\"Ready\" or \"TYPE=STATUS\") or phase=")
        ref = f"{namespace}/{name}"
        if phase is not None:
            if phase not in names.PHASES:
                raise ValueError(f"phase {phase!r}: want one of {', '.join(names.PHASES)}")

            def phase_done(b: Binding) -> bool:
                st = _status(b)
                p = st.get("phase", "")
                if p == phase:
                    return True
                if final(p):
                    raise errors.PhaseError(ref, p, st.get("reason", ""), st.get("message", ""), want=str(phase))
                return False
            return self.wait_until(namespace, name, phase_done, f"phase {phase}", timeout, on_change)
        typ, _, want = str(condition).partition("=")
        want = want or "True"
        if not typ or want.lower() not in ("true", "false", "unknown"):
            raise ValueError(f"condition {condition!r}: want TYPE or TYPE=STATUS with STATUS True, False or Unknown")
        outcome = typ in names.OUTCOME_CONDITION_TYPES

        def condition_done(b: Binding) -> bool:
            st = _status(b)
            cond = next((c for c in st.get("conditions") or [] if c.get("type") == typ), None)
            if cond is not None and str(cond.get("status", "")).lower() == want.lower():
                return True
            if outcome and final(st.get("phase", "")):
                raise errors.ConditionError(ref, typ, want, cond.get("status", "") if cond else "",
                                            st.get("phase", ""), st.get("reason", ""), st.get("message", ""))
            return False
        return self.wait_until(namespace, name, condition_done, f"condition {typ}={want}", timeout, on_change)

    # Progress.

    def progress(self, namespace: str, name: str) -> Progress:
        """The job's training progress: step, epoch, loss, fraction and ETA
        from the binding's status.progress and, if the caller may read it,
        the TrainJob's status.trainerStatus."""
        wb = self.get(namespace, name)
        tj = None
        try:
            tj = self.kube.request("GET", trainjob_path(namespace, wb.get("spec", {}).get("trainJobName") or name))
        except APIError as e:
            if e.status not in (403, 404):
                raise
        return from_status(wb, tj)

    # Commands.

    def send(self, namespace: str, name: str, command: str) -> str:
        """Asks the workers of binding namespace/name to run command
        (names.FLUSH, DRAIN or CANCEL) and returns the command's id, for
        wait_command. The id is new each time. CANCEL alone stops nothing:
        cancel() stops the trainer after it."""
        if command not in (names.FLUSH, names.DRAIN, names.CANCEL):
            raise ValueError(f"command {command!r}: want {names.FLUSH}, {names.DRAIN} or {names.CANCEL}")
        cid = _base36(time.time_ns())
        patch = {"metadata": {"annotations": {names.COMMAND_ANNOTATION: f"{command}:{cid}"}}}
        try:
            self.kube.request("PATCH", bindings_path(namespace, name), body=patch,
                              content_type="application/merge-patch+json")
        except APIError as e:
            if e.status == 404:
                raise errors.NotBound(namespace, name, f"sending {command}") from None
            raise errors.TetherError(f"sending {command} to {namespace}/{name}: {e}") from e
        return cid

    def wait_command(self, namespace: str, name: str, command_id: str, timeout: Optional[float] = None,
                     on_change: Optional[OnChange] = None) -> dict[str, Any]:
        """Waits until command command_id is acknowledged by every node it
        was sent to and returns its status (status.lastCommand). A failed
        command raises CommandFailed; a binding that ends first PhaseError."""
        ref = f"{namespace}/{name}"
        out: dict[str, Any] = {}

        def acked(b: Binding) -> bool:
            st = _status(b)
            lc = st.get("lastCommand") or {}
            if lc.get("id") == command_id:
                if lc.get("state") == names.COMMAND_ACKNOWLEDGED:
                    out.update(lc)
                    return True
                if lc.get("state") == names.COMMAND_FAILED:
                    raise errors.CommandFailed(ref, lc)
            if final(st.get("phase", "")):
                raise errors.PhaseError(ref, st.get("phase", ""), st.get("reason", ""), st.get("message", ""),
                                        before=f"command {command_id} was acknowledged: a finished job runs no commands")
            return False
        self.wait_until(namespace, name, acked, f"acknowledgement of command {command_id}", timeout, on_change)
        return out

    def flush(self, namespace: str, name: str, timeout: Optional[float] = None) -> dict[str, Any]:
        """Every node uploads its artifacts now and keeps training; returns
        the command's status once every node acknowledged it."""
        return self.wait_command(namespace, name, self.send(namespace, name, names.FLUSH), timeout)

    def drain(self, namespace: str, name: str, timeout: Optional[float] = None) -> dict[str, Any]:
        """Every node wraps up: flush, then report Finishing; returns the
        command's status once every node acknowledged it."""
        return self.wait_command(namespace, name, self.send(namespace, name, names.DRAIN), timeout)

    def cancel(self, namespace: str, name: str, timeout: float = 120.0, delete: bool = False) -> "CancelResult":
        """Stops the trainer as pkg/client's Cancel does (see tether.cancel)."""
        from .cancel import cancel
        return cancel(self, namespace, name, timeout, delete)

    # Logs.

    def log_pods(self, binding: Binding) -> List[str]:
        """The pods whose trainer logs are archived, in the order listed."""
        job = binding.get("spec", {}).get("jobID", "")
        pods = []
        for key in (_status(binding).get("artifacts") or {}).get("logs") or []:
            p = key.removeprefix(job + "/").removeprefix(names.LOGS_DIR)
            pods.append(p.removesuffix(".log"))
        return pods

    def logs(self, namespace: str, name: str, pod: Optional[str] = None, rank: Optional[int] = None,
             attempt: Optional[int] = None) -> Body:
        """Opens an archived trainer log (status.artifacts.logs): of pod, of
        node rank's pod (its current one, or with attempt the pod whose exit
        ended that attempt, as status.nodes[].lastExit and
        status.lastTrainerExit record it), or the only one archived. A
        streamed body (``.stream()``, ``.read()``, ``.release_conn()``)."""
        wb = self.get(namespace, name)
        pods = self.log_pods(wb)
        if pod is None and rank is not None:
            pod = _pod_of(wb, rank, attempt, f"{namespace}/{name}")
        if pod is None:
            if len(pods) != 1:
                raise errors.LogNotFound(
                    f"{namespace}/{name} has {len(pods)} archived logs: name the pod (pod=) or the rank (rank=), "
                    f"one of {pods}" if pods else
                    f"{namespace}/{name} has no archived trainer log yet (one is archived when a trainer container terminates)")
            pod = pods[0]
        job = wb.get("spec", {}).get("jobID", "")
        key = names.log_key(job, pod)
        if key not in ((_status(wb).get("artifacts") or {}).get("logs") or []):
            raise errors.LogNotFound(
                f"no archived log of pod {pod} in {namespace}/{name} (status.artifacts.logs lists them; a log is "
                f"archived once the trainer container terminated)")
        return self.reader.open(namespace, name, key.removeprefix(job + "/"))


def _pod_of(wb: Binding, rank: int, attempt: Optional[int], ref: str) -> str:
    """The pod of node rank: the current one, or the one that ended attempt."""
    st = _status(wb)
    node = next((n for n in st.get("nodes") or [] if n.get("rank", 0) == rank), None)
    if attempt is None or attempt == st.get("attempt"):
        if node is None or not node.get("podName"):
            raise errors.LogNotFound(f"{ref} has no node {rank} with a pod (status.nodes)")
        return str(node["podName"])
    for ex in ((node or {}).get("lastExit"), st.get("lastTrainerExit")):
        if ex and ex.get("rank", 0) == rank and ex.get("attempt") == attempt and ex.get("podName"):
            return str(ex["podName"])
    raise errors.LogNotFound(
        f"{ref} records no pod of node {rank} in attempt {attempt} (only the current attempt's pods and the last exits "
        f"are recorded): name the pod (pod=), one of client.log_pods(binding)")


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def _load_api_client(kubeconfig: Optional[str], context: Optional[str]) -> Any:
    import os

    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if kubeconfig or context or os.path.exists(path):
        return k8s_config.new_client_from_config(config_file=path, context=context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=cfg)
        return k8s.ApiClient(cfg)
    raise errors.TetherError(f"no kubeconfig at {path} and not in a pod: pass kubeconfig= or set KUBECONFIG")
