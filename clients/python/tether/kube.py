"""The Kubernetes API calls the client makes, through the official client's
ApiClient.call_api with JSON bodies it writes itself: the same requests on
every kubernetes client version from Debian 12's (22.6) on."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

from . import names

Obj = dict[str, Any]


class APIError(Exception):
    """An API server answer other than 2xx."""

    def __init__(self, status: int, reason: str, message: str, body: Obj) -> None:
        self.status, self.reason, self.message, self.body = status, reason, message, body
        super().__init__(f"{status} {reason}: {message}")


class Kube:
    """JSON requests to the API server of api_client."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def _call(self, method: str, path: str, query: Optional[list[tuple[str, str]]] = None,
              body: Optional[Obj] = None, content_type: str = "application/json",
              timeout: Optional[tuple[float, float]] = None) -> Any:
        from kubernetes.client.rest import ApiException
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            return self.api_client.call_api(
                path, method, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                _request_timeout=timeout)
        except ApiException as e:
            raw = e.body if isinstance(e.body, (bytes, str)) else b""
            try:
                st = json.loads(raw) if raw else {}
            except ValueError:
                st = {"message": raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw}
            if not isinstance(st, dict):
                st = {}
            raise APIError(e.status, st.get("reason") or (e.reason or ""), st.get("message", ""), st) from None

    def request(self, method: str, path: str, query: Optional[list[tuple[str, str]]] = None,
                body: Optional[Obj] = None, content_type: str = "application/json") -> Obj:
        """One request; the answer's JSON."""
        r = self._call(method, path, query, body, content_type)
        try:
            data = r.data
        finally:
            r.release_conn()
        return json.loads(data) if data else {}  # type: ignore[no-any-return]

    def stream_lines(self, path: str, query: list[tuple[str, str]], timeout: float) -> Iterator[Obj]:
        """The JSON lines of a watch (each one event); ends when the API
        server ends the watch."""
        r = self._call("GET", path, query, timeout=(30.0, timeout + 30.0))
        buf = b""
        try:
            for chunk in r.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buf.strip():
                yield json.loads(buf)
        finally:
            r.release_conn()


def bindings_path(namespace: str, name: str = "") -> str:
    p = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}"
    return p + (f"/{name}" if name else "")


def trainjob_path(namespace: str, name: str) -> str:
    return f"/apis/{names.TRAINJOB_GROUP}/{names.TRAINJOB_VERSION}/namespaces/{namespace}/{names.TRAINJOB_PLURAL}/{name}"
