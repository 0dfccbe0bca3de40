"""Reads of a job's stored objects (manifests, artifacts, logs) with the
caller's own Kubernetes credentials, as pkg/client reads them: through the
API server's aggregated read API by default (the control plane streams
every object, X-Tether-Stream: true), or in-cluster from the binding Service
(read_url), which may redirect to a presigned URL of the store that is
fetched without the caller's token. A failed read raises a ReadError
subclass naming its cause (pkg/client/readerrors.go)."""

from __future__ import annotations

import json
import os
import ssl
from typing import Any, Callable, Iterator, Optional, Protocol
from urllib.parse import quote, urlsplit

import urllib3

from . import errors, names

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


class Body(Protocol):
    """A streamed response body (urllib3's HTTPResponse)."""

    def stream(self, amt: int = ..., decode_content: Optional[bool] = ...) -> Iterator[bytes]: ...

    def release_conn(self) -> None: ...


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + "..."


def read_api_grant(namespace: str) -> str:
    """The permission a read through the API server needs."""
    return (f"reading a job's objects through the API server needs the verb get on the resource "
            f"{names.READ_API_RESOURCE}/{names.READ_API_SUBRESOURCE} in the API group {names.READ_API_GROUP} "
            f"in namespace {namespace}: an RBAC Role bound to you there must grant it, e.g. the shipped ClusterRole "
            f"tether-artifact-reader: kubectl create rolebinding artifact-readers -n {namespace} "
            f"--clusterrole=tether-artifact-reader --user=<you> (or --group, --serviceaccount)")


def read_failure(status: int, body: bytes, location: str, namespace: str, via_api_server: bool) -> errors.ReadError:
    """The error of a read of an object of a binding in namespace that was
    not answered 200: its cause, and what to do about it."""
    try:
        answer = json.loads(body)
        if not isinstance(answer, dict):
            raise ValueError
    except ValueError:
        # The API server answers some refusals in plain text.
        answer = {"message": _truncate(body.decode("utf-8", "replace").strip(), 300)}
    kind, reason, message = answer.get("kind", ""), answer.get("reason", "") or "", answer.get("message", "") or ""
    from_control_plane = kind != "Status" and reason != ""
    if not reason:
        reason = _status_text(status)
    cls: type[errors.ReadError] = errors.ReadError
    if status == 307:
        reason, cls = "Redirect", errors.ReadRedirected
        message = ("the control plane answered with a redirect to the store (" + _truncate(location, 80) +
                   "), and reads through the API server are always streamed: the control plane is older than this "
                   "client or misconfigured (the API server passes a redirect on only with "
                   "--aggregator-reject-forwarding-redirect=false): upgrade Tether, or read from inside the cluster "
                   "through the binding Service (read_url)")
    elif from_control_plane:
        if status == 503 and reason == "store":
            cls = errors.StoreUnavailable
            message = ("the control plane could not read the object from the artifact store (503 from the control "
                       "plane): the store is down or unreachable from the control plane; retry later, or have the "
                       "platform team check the store (the control plane's log has the store's error)")
        elif status == 403:
            cls = errors.ReadForbidden
            if via_api_server:
                message += ": " + read_api_grant(namespace)
    elif via_api_server:
        cls, message = _api_server_failure(status, message, namespace)
    else:
        message = "the answer is not the control plane's (is read_url the binding Service?): " + message
    return cls(status, reason, message, via_api_server)


def _api_server_failure(status: int, message: str, namespace: str) -> tuple[type[errors.ReadError], str]:
    said = f" (the API server said: {message})" if message else ""
    svc = names.READ_API_SERVICE
    if status == 404:
        return errors.ReadAPINotInstalled, (
            f"the API server serves no {names.READ_API_GROUP}/{names.READ_API_VERSION}: the read API is not installed "
            f"(the APIService {svc} is absent). A cluster administrator enables it with the chart value "
            f"readAPI.enabled=true or the kustomize component manifests/overlays/read-api (docs/platform.md, "
            f"\"Install\"); from inside the cluster, the binding Service serves the same reads (read_url)" + said)
    if status == 403:
        return errors.ReadForbidden, read_api_grant(namespace) + said
    if status == 503:
        return errors.ReadError, (
            f"the API server cannot reach the read API: the APIService {svc} is registered but not Available "
            f"(no control-plane replica ready?); kubectl get apiservice {svc} says why" + said)
    if status == 502:
        text = "the API server got no usable answer from the read API" + said
        if "redirect" in text:
            return errors.ReadRedirected, (
                "the control plane answered with a redirect to the store, which the API server does not pass on: "
                "the control plane is older than this client (a current one streams every read through the API "
                "server): upgrade Tether, or read from inside the cluster through the binding Service (read_url)" + said)
        return errors.ReadError, text
    if status == 401:
        return errors.ReadError, "the API server did not accept the kubeconfig's credentials (expired token?)" + said
    if not said:
        return errors.ReadError, (f"the API server answered with no error body; kubectl get apiservice {svc} "
                                  f"shows whether the read API is Available")
    return errors.ReadError, message


def _status_text(status: int) -> str:
    from http import HTTPStatus
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return str(status)


def object_path(prefix: str, namespace: str, name: str, rel: str) -> str:
    """The read path of the object at rel (relative to the job's prefix)."""
    return f"{prefix}{quote(namespace)}/workerbindings/{quote(name)}/objects/{quote(rel, safe='/')}"


class APIServerReader:
    """Reads through the kube-apiserver of api_client (the aggregated read
    API), with every credential its configuration has."""

    via_api_server = True

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def open(self, namespace: str, name: str, rel: str) -> Body:
        """Opens the object at rel of binding namespace/name, streamed."""
        from kubernetes.client.rest import ApiException
        path = object_path(names.READ_API_PATH_PREFIX, namespace, name, rel)
        try:
            r = self.api_client.call_api(
                path, "GET", header_params={names.HEADER_STREAM: "true", "Accept": "*/*"},
                auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True)
        except ApiException as e:
            headers = e.headers or {}
            body = e.body if isinstance(e.body, bytes) else (e.body or "").encode()
            raise read_failure(e.status, body, headers.get("Location", ""), namespace, True) from None
        # The kubernetes client's urllib3 follows redirects; a read through
        # the API server is always streamed, so one followed is refused as
        # the Go client refuses it (ErrReadRedirected).
        history = getattr(getattr(r, "retries", None), "history", None) or ()
        redirects = [h for h in history if getattr(h, "redirect_location", None)]
        if redirects:
            r.release_conn()
            raise read_failure(307, b"", str(redirects[0].redirect_location), namespace, True)
        return r  # type: ignore[no-any-return]


class ServiceReader:
    """Reads from the control plane's binding Service (in-cluster): a bearer
    token (token_source) authenticates; a redirect to a presigned URL of the
    store is followed without it."""

    via_api_server = False

    def __init__(self, read_url: str, token_source: Callable[[], str], read_ca: Optional[str] = None,
                 read_server_name: Optional[str] = None) -> None:
        u = urlsplit(read_url.rstrip("/"))
        if u.scheme != "https" or not u.netloc:
            raise errors.ReadEndpointConfig(
                f"read URL {read_url!r}: want https://host[:port] of the control plane's binding Service")
        self.base = read_url.rstrip("/")
        self.token_source = token_source
        if read_ca and not os.path.exists(read_ca):
            raise errors.ReadEndpointConfig(f"read CA {read_ca}: no such file (the control plane's CA bundle, PEM)")
        if not read_ca:
            import certifi
            read_ca = certifi.where()
        ctx = ssl.create_default_context(cafile=read_ca)
        # Every certificate of the bundle is a trust anchor, as for Go's
        # verifier (pkg/client's ReadCA): a bundle may hold the serving
        # certificate itself rather than its issuer.
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        # urllib3 matches the name itself (IP addresses included, which the
        # ssl module's check cannot be given without SNI).
        ctx.check_hostname = False
        kw: dict[str, Any] = {"ssl_context": ctx, "cert_reqs": ssl.CERT_REQUIRED}
        if read_server_name:
            kw["server_hostname"] = read_server_name
            kw["assert_hostname"] = read_server_name
        self.pool = urllib3.PoolManager(**kw)
        self.store = urllib3.PoolManager()

    def open(self, namespace: str, name: str, rel: str) -> Body:
        """Opens the object at rel of binding namespace/name; a redirect is
        followed to the store without the caller's token."""
        token = self.token_source()
        if not token:
            raise errors.ReadEndpointConfig(
                "the kubeconfig has no bearer token, and the read endpoint authenticates Kubernetes bearer tokens: "
                "use a kubeconfig user with a token (kubectl create token <serviceaccount>) or run in a pod")
        url = self.base + object_path(names.READ_PATH_PREFIX, namespace, name, rel)
        try:
            r = self.pool.request("GET", url, headers={"Authorization": "Bearer " + token},
                                  preload_content=False, redirect=False, retries=False)
        except urllib3.exceptions.SSLError as e:
            raise errors.ReadEndpointConfig(
                f"read endpoint {self.base}: {e}: read_ca must be the control plane's CA bundle (the ca.crt of a "
                f"job's token Secret), and read_server_name the name its certificate carries if read_url uses another"
            ) from None
        except urllib3.exceptions.HTTPError as e:
            raise errors.TetherError(f"read endpoint {self.base}: {e} (is read_url the binding Service?)") from None
        if r.status == 200:
            return r  # type: ignore[no-any-return]
        if r.status == 307:
            loc = r.headers.get("Location", "")
            r.release_conn()
            return self._presigned(loc)
        body = r.read(64 << 10)
        r.release_conn()
        raise read_failure(r.status, body, r.headers.get("Location", ""), namespace, False)

    def _presigned(self, loc: str) -> Body:
        if urlsplit(loc).scheme not in ("http", "https"):
            raise errors.TetherError(f"read endpoint redirected to {loc!r}: not an http(s) URL")
        try:
            r = self.store.request("GET", loc, preload_content=False, redirect=False, retries=False)
        except urllib3.exceptions.HTTPError as e:
            raise errors.TetherError(f"fetching the presigned URL from the store: {e}") from None
        if r.status != 200:
            b = r.read(1024)
            r.release_conn()
            raise errors.TetherError(f"the store answered the presigned URL with {r.status}: "
                                     f"{b.decode('utf-8', 'replace').strip()}")
        return r  # type: ignore[no-any-return]


def token_of(api_client: Any) -> Callable[[], str]:
    """The bearer token source of api_client's configuration, else the
    pod's ServiceAccount token (re-read each time: it rotates)."""
    def token() -> str:
        cfg = api_client.configuration
        refresh = getattr(cfg, "refresh_api_key_hook", None)
        if refresh is not None:
            refresh(cfg)
        key = (getattr(cfg, "api_key", None) or {}).get("authorization", "")
        if key:
            # "Bearer <token>" from a kubeconfig, "bearer <token>" in-cluster.
            scheme, _, rest = str(key).strip().partition(" ")
            return rest.strip() if scheme.lower() == "bearer" and rest else str(key).strip()
        if os.path.exists(SERVICE_ACCOUNT_TOKEN):
            with open(SERVICE_ACCOUNT_TOKEN) as f:
                return f.read().strip()
        return ""
    return token
