"""The requests the client hands the official kubernetes client's
ApiClient.call_api: what they carry, and how answers and refusals come back."""

import json

import pytest
from kubernetes.client.rest import ApiException

import tether
from fakes import FakeBody
from tether.kube import APIError, Kube
from tether.reads import APIServerReader, ServiceReader


class FakeApiClient:
    def __init__(self, answer=None, error=None):
        self.answer, self.error, self.calls = answer, error, []

    def call_api(self, path, method, **kw):
        self.calls.append((path, method, kw))
        if self.error is not None:
            raise self.error
        return self.answer


class Answer(FakeBody):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)

    def read(self, amt=None):
        return self.data


def refusal(status, body, headers=None):
    e = ApiException(status=status, reason="r")
    e.body, e.headers = body, headers or {}
    return e


def test_reads_through_the_api_server_stream_and_ask_for_streaming():
    api = FakeApiClient(answer=FakeBody(b"bytes"))
    body = APIServerReader(api).open("team a", "job", "ckpt/step 1.pt")
    assert b"".join(body.stream()) == b"bytes"
    path, method, kw = api.calls[0]
    assert path == "/apis/artifacts.tether.dev/v1alpha1/namespaces/team%20a/workerbindings/job/objects/ckpt/step%201.pt"
    assert method == "GET" and kw["header_params"]["X-Tether-Stream"] == "true"
    assert kw["_preload_content"] is False and kw["auth_settings"] == ["BearerToken"]


def test_a_redirect_followed_by_the_kubernetes_client_is_refused():
    from urllib3.util.retry import RequestHistory, Retry
    body = FakeBody(b"store bytes")
    body.retries = Retry(history=(RequestHistory("GET", "https://apiserver/x", None, 307, "https://store/presigned"),))
    with pytest.raises(tether.ReadRedirected, match="https://store/presigned") as e:
        APIServerReader(FakeApiClient(answer=body)).open("team", "job", "model.pt")
    assert e.value.status == 307 and body.released


def test_a_refused_read_names_its_cause():
    api = FakeApiClient(error=refusal(404, b"404 page not found"))
    with pytest.raises(tether.ReadAPINotInstalled, match="APIService v1alpha1.artifacts.tether.dev is absent"):
        APIServerReader(api).open("team", "job", "manifest.json")
    api = FakeApiClient(error=refusal(503, json.dumps({"reason": "store", "message": "x"}).encode()))
    with pytest.raises(tether.StoreUnavailable):
        APIServerReader(api).open("team", "job", "manifest.json")


def test_watch_lines_split_across_chunks_are_joined():
    events = [{"type": "ADDED", "object": {"metadata": {"name": "a"}}},
              {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "2"}}}]
    api = FakeApiClient(answer=FakeBody("\n".join(json.dumps(e) for e in events).encode() + b"\n"))
    assert list(Kube(api).stream_lines("/apis/x", [("watch", "true")], 5)) == events


def test_api_refusals_carry_the_status():
    api = FakeApiClient(error=refusal(403, json.dumps({"kind": "Status", "reason": "Forbidden", "message": "no"}).encode()))
    with pytest.raises(APIError) as e:
        Kube(api).request("PATCH", "/apis/x", body={"a": 1}, content_type="application/merge-patch+json")
    assert (e.value.status, e.value.reason, e.value.message) == (403, "Forbidden", "no")
    assert api.calls[0][2]["header_params"]["Content-Type"] == "application/merge-patch+json"
    api = FakeApiClient(answer=Answer(b'{"items": []}'))
    assert Kube(api).request("GET", "/apis/x") == {"items": []}


def test_read_url_is_checked():
    with pytest.raises(tether.ReadEndpointConfig, match="want https://host"):
        ServiceReader("http://svc:8443", lambda: "t")
    with pytest.raises(tether.ReadEndpointConfig, match="no such file"):
        ServiceReader("https://svc:8443", lambda: "t", read_ca="/nonexistent/ca.crt")
    with pytest.raises(tether.ReadEndpointConfig, match="no bearer token"):
        ServiceReader("https://svc:8443", lambda: "").open("team", "job", "manifest.json")
