"""Typed errors of the Tether client. Each says what was wrong and how to fix
it, in the words of Tether's Go client (pkg/client) whose errors they mirror."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import names

if TYPE_CHECKING:
    from .cancel import CancelResult


class TetherError(Exception):
    """Every error this package raises on purpose."""


class NotBound(TetherError, LookupError):
    """The WorkerBinding does not exist: its TrainJob is not bound (yet)."""

    def __init__(self, namespace: str, name: str, detail: str = "") -> None:
        self.namespace, self.name = namespace, name
        msg = (f"WorkerBinding {namespace}/{name} does not exist (is its TrainJob labeled "
               f"{names.BIND_LABEL}={names.BIND_VALUE}? tether.bind() adds the label)")
        super().__init__(msg + (f": {detail}" if detail else ""))


class BindingDeleted(TetherError):
    """The binding was deleted while it was waited on (its TrainJob is gone)."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        super().__init__(f"WorkerBinding {namespace}/{name} was deleted (its TrainJob is gone)")


class Timeout(TetherError, TimeoutError):
    """A wait ended at its timeout before what it waited for happened."""

    def __init__(self, binding: str, waited_for: str, timeout: float, phase: str = "", exists: bool = True) -> None:
        self.binding, self.waited_for, self.timeout, self.phase = binding, waited_for, timeout, phase
        if not exists:
            msg = (f"waiting {timeout:g}s for {waited_for} of WorkerBinding {binding}, which does not exist "
                   f"(is its TrainJob labeled {names.BIND_LABEL}={names.BIND_VALUE}?)")
        else:
            msg = (f"waiting for {waited_for} of WorkerBinding {binding} (phase {phase or 'unset'}): "
                   f"not reached within {timeout:g}s; wait longer (timeout=) or look at the binding "
                   f"(kubectl tether describe)")
        super().__init__(msg)


class PhaseError(TetherError):
    """A binding that ended in a phase other than the one waited for, or
    before what was waited for happened (before)."""

    def __init__(self, binding: str, got: str, reason: str, message: str, want: str = "", before: str = "") -> None:
        self.binding, self.want, self.got, self.reason, self.message, self.before = binding, want, got, reason, message, before
        if before:
            text = f"WorkerBinding {binding} ended {got} ({reason}: {message}) before {before}"
        else:
            text = f"WorkerBinding {binding} ended {got} ({reason}: {message}), not {want}"
        super().__init__(text)


class ConditionError(TetherError):
    """A binding that ended (Succeeded or Failed) without the outcome
    condition waited for: it no longer changes then."""

    def __init__(self, binding: str, condition: str, want: str, got: str, phase: str, reason: str, message: str) -> None:
        self.binding, self.condition, self.want, self.got = binding, condition, want, got
        self.phase, self.reason, self.message = phase, reason, message
        if not got:
            text = (f"WorkerBinding {binding} ended {phase} ({reason}: {message}) without condition {condition} "
                    f"(the control plane that finished it predates the outcome conditions; wait with "
                    f"phase={names.PHASE_SUCCEEDED} instead)")
        else:
            text = (f"WorkerBinding {binding} ended {phase} ({reason}: {message}) with condition "
                    f"{condition}={got}, which can no longer become {want}")
        super().__init__(text)


class CommandFailed(TetherError):
    """A command a node refused or failed (status.lastCommand.state Failed)."""

    def __init__(self, binding: str, status: dict[str, Any]) -> None:
        self.binding, self.status = binding, status
        super().__init__(
            f"{status.get('name')} {status.get('id')} on {binding} failed: {status.get('message', '')} "
            f"(sent to nodes {status.get('sentNodes', [])}, acknowledged by {status.get('ackedNodes', [])})")


class Forbidden(TetherError, PermissionError):
    """A permission the caller lacks to stop the job (cancel checks before
    it sends anything, so nothing was sent)."""

    def __init__(self, verb: str, resource: str, namespace: str, name: str, cause: str) -> None:
        self.verb, self.resource, self.namespace, self.name, self.cause = verb, resource, namespace, name, cause
        res, _, group = resource.partition(".")
        super().__init__(
            f"cancel needs {verb} on {resource} in namespace {namespace} ({name}), which the caller lacks: "
            f"{cause}; nothing was sent. Grant it with a Role rule {{apiGroups: [\"{group}\"], "
            f"resources: [\"{res}\"], verbs: [\"{verb}\"]}} (docs/orchestrator.md)")


class CancelFlushError(TetherError):
    """The job was stopped, but its final flush failed or was not
    acknowledged in time: some files may not be stored (result says which)."""

    def __init__(self, binding: str, result: "CancelResult") -> None:
        self.binding, self.result = binding, result
        r = result
        msg = f"{binding} stopped ({r.stop}), but its final flush did not complete: {r.flush_error}"
        if r.unverified:
            msg += f"; {r.unverified_count} file(s) not verified: {', '.join(r.unverified)}"
            if r.unverified_count > len(r.unverified):
                msg += f" and {r.unverified_count - len(r.unverified)} more"
        if r.unverified_summary:
            msg += "; " + r.unverified_summary
        super().__init__(msg)


class ManifestDigestMismatch(TetherError):
    """A stored manifest that is not the one the binding server verified."""

    def __init__(self, rank: int, key: str, want: str, got: str, final: bool) -> None:
        self.rank, self.key, self.want, self.got, self.final = rank, key, want, got, final
        if not want:
            msg = (f"node {rank}'s manifest {key} has no SHA-256 recorded on the binding, and the control plane "
                   f"records one with every verdict: the status was not written by it; refusing the manifest "
                   f"and the files it lists")
        else:
            msg = (f"node {rank}'s manifest {key} has SHA-256 {got}, but the binding recorded {want} when it was "
                   f"verified: the stored manifest was changed; refusing it and the files it lists")
            if not final:
                msg += (" (before the binding succeeds, a newer manifest may still wait to be promoted: "
                        "read again once it is Succeeded)")
        super().__init__(msg)


class ArtifactDigestMismatch(TetherError):
    """A download whose content is not what the manifest lists; nothing was
    written at the destination."""

    def __init__(self, path: str, want_md5: str, got_md5: str, want_size: int, got_size: int) -> None:
        self.path, self.want_md5, self.got_md5, self.want_size, self.got_size = path, want_md5, got_md5, want_size, got_size
        if want_size != got_size:
            msg = (f"artifact {path}: {got_size} bytes read, the manifest lists {want_size}: the stored object "
                   f"was changed or truncated; refusing it")
        else:
            msg = f"artifact {path}: MD5 {got_md5}, the manifest lists {want_md5}: the stored object was changed; refusing it"
        super().__init__(msg)


class ArtifactNotFound(TetherError, LookupError):
    """No artifact at that path in the job's manifests, or not verified."""


class LogNotFound(TetherError, LookupError):
    """No archived trainer log of that pod."""


class ReadError(TetherError):
    """A read refused by the read endpoint, or by the API server in front of
    the read API. Subclasses name the causes a caller can act on."""

    def __init__(self, status: int, reason: str, message: str, via_api_server: bool) -> None:
        self.status, self.reason, self.message, self.via_api_server = status, reason, message, via_api_server
        where = "read API (through the API server)" if via_api_server else "read endpoint (binding Service)"
        super().__init__(f"{where}: {status} {reason}: {message}")


class ReadAPINotInstalled(ReadError):
    """The API server serves no read API (the APIService is absent)."""


class ReadForbidden(ReadError, PermissionError):
    """The caller may not read the binding's objects."""


class StoreUnavailable(ReadError):
    """The control plane could not read the artifact store (its 503)."""


class ReadRedirected(ReadError):
    """A read through the API server met a redirect to the store."""


class ReadEndpointConfig(TetherError, ValueError):
    """The read_url / read_ca options are not usable."""
