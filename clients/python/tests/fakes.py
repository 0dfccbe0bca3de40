"""Stand-ins for the API server and the read API: they record every request
and answer from what a test put in them, so the client's own logic runs."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Iterator, Optional

import tether
from tether.kube import APIError, Obj


def binding(name: str = "job", ns: str = "team", phase: str = "Running", rv: str = "1", **status: Any) -> Obj:
    st = {"phase": phase}
    st.update(status)
    return {"apiVersion": "tether.dev/v1alpha1", "kind": "WorkerBinding",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
            "spec": {"trainJobName": name, "jobID": "jid"}, "status": st}


class FakeKube:
    """Answers request() from handlers keyed by (method, path); watch
    requests take the next of streams (a list of events, or an APIError)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list[tuple[str, str]], Optional[Obj], str]] = []
        self.handlers: dict[tuple[str, str], Callable[[list[tuple[str, str]], Optional[Obj]], Obj]] = {}
        self.streams: list[Any] = []
        self.watch_queries: list[list[tuple[str, str]]] = []

    def on(self, method: str, path: str, answer: Any) -> None:
        def handler(query: list[tuple[str, str]], body: Optional[Obj]) -> Obj:
            if isinstance(answer, Exception):
                raise answer
            return answer(query, body) if callable(answer) else answer
        self.handlers[(method, path)] = handler

    def request(self, method: str, path: str, query: Optional[list[tuple[str, str]]] = None,
                body: Optional[Obj] = None, content_type: str = "application/json") -> Obj:
        self.calls.append((method, path, list(query or []), body, content_type))
        h = self.handlers.get((method, path))
        if h is None:
            raise APIError(404, "NotFound", f"{method} {path} not found", {})
        return h(list(query or []), body)

    def stream_lines(self, path: str, query: list[tuple[str, str]], timeout: float) -> Iterator[Obj]:
        self.watch_queries.append(list(query))
        if not self.streams:
            return
        nxt = self.streams.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        yield from nxt


class FakeBody:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def stream(self, amt: int = 1 << 16, decode_content: Optional[bool] = None) -> Iterator[bytes]:
        for i in range(0, len(self.data), 7):  # small chunks: checks span several
            yield self.data[i:i + 7]

    def release_conn(self) -> None:
        self.released = True


class FakeReader:
    via_api_server = True

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.opened: list[str] = []

    def open(self, namespace: str, name: str, rel: str) -> FakeBody:
        self.opened.append(rel)
        if rel not in self.objects:
            raise tether.errors.ReadError(404, "NotFound", rel, True)
        return FakeBody(self.objects[rel])


def client(kube: FakeKube, reader: Optional[FakeReader] = None) -> tether.Client:
    c = tether.Client(api_client=object())
    c.kube = kube  # type: ignore[assignment]
    if reader is not None:
        c.reader = reader  # type: ignore[assignment]
    return c


def manifest(files: dict[str, bytes]) -> bytes:
    return json.dumps({"version": "v1", "jobID": "jid", "podUID": "u",
                       "files": [{"path": p, "size": len(b), "md5": hashlib.md5(b).hexdigest()}
                                 for p, b in files.items()]}).encode()
