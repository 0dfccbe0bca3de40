import json
import os
import re
from datetime import timedelta

import pytest

import tether
from fakes import FakeKube, FakeReader, binding, client
from tether.progress import from_status, parse_go_duration
from tether.reads import read_failure

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..", "..")


def test_version_is_tethers():
    go = open(os.path.join(REPO, "internal", "version", "version.go")).read()
    want = re.search(r'^var Version = "v(.*)"$', go, re.M).group(1)
    py = open(os.path.join(HERE, "..", "pyproject.toml")).read()
    assert re.search(r'^version = "(.*)"$', py, re.M).group(1) == want
    assert tether.__version__ == want


def test_readme_lists_only_names_that_exist():
    readme = open(os.path.join(HERE, "..", "README.md")).read()
    listed = re.findall(r"^[-|] *`(tether(?:\.\w+)+)", readme, re.M)
    assert len(listed) > 20
    for dotted in listed:
        obj = tether
        for part in dotted.split(".")[1:]:
            assert hasattr(obj, part), f"README.md lists {dotted}, which the package does not have"
            obj = getattr(obj, part)


def test_bind_adds_the_label_and_keeps_others():
    tj = {"kind": "TrainJob", "metadata": {"name": "j", "labels": {"team": "a"}}}
    assert tether.bind(tj) is tj
    assert tj["metadata"]["labels"] == {"team": "a", "tether.dev/bind": "true"}
    assert tether.BIND_LABELS == {"tether.dev/bind": "true"}
    with pytest.raises(ValueError):
        tether.bind({"kind": "Job"})


def test_progress_from_the_binding_and_trainer_status():
    wb = binding(progress={"step": 100, "loss": "0.5", "fraction": "0.25", "stepInterval": "2s",
                           "updatedTime": "2026-01-01T00:00:00Z"})
    p = from_status(wb)
    assert (p.step, p.loss, p.fraction, p.eta) == (100, 0.5, 0.25, timedelta(seconds=600))
    tj = {"status": {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 90,
                                       "metrics": [{"name": "loss", "value": "1.5"}, {"name": "step", "value": "7"}]}}}
    p = from_status(binding(), tj)
    assert (p.step, p.loss, p.fraction, p.eta) == (7, 1.5, 0.4, timedelta(seconds=90))
    assert parse_go_duration("1h2m3.5s") == timedelta(hours=1, minutes=2, seconds=3.5)
    assert parse_go_duration("150ms") == timedelta(milliseconds=150) and parse_go_duration("x") is None


def test_progress_reads_the_trainjob_when_allowed():
    k = FakeKube()
    k.on("GET", "/apis/tether.dev/v1alpha1/namespaces/team/workerbindings/job", binding(progress={"step": 3}))
    assert client(k).progress("team", "job").step == 3  # the TrainJob's 404 is no error


@pytest.mark.parametrize("status,body,via,cls,words", [
    (404, b"404 page not found", True, tether.ReadAPINotInstalled, "readAPI.enabled=true"),
    (403, json.dumps({"kind": "Status", "reason": "Forbidden", "message": "no"}).encode(), True, tether.ReadForbidden,
     "kubectl create rolebinding artifact-readers -n team"),
    (503, json.dumps({"reason": "store", "message": "dial tcp"}).encode(), True, tether.StoreUnavailable, "retry later"),
    (307, b"", True, tether.ReadRedirected, "upgrade Tether"),
    (502, b"error trying to reach service: redirect", True, tether.ReadRedirected, "older than this client"),
    (503, b"service unavailable", True, tether.ReadError, "kubectl get apiservice v1alpha1.artifacts.tether.dev"),
    (500, b"boom", False, tether.ReadError, "is read_url the binding Service?"),
])
def test_read_failures_name_their_cause(status, body, via, cls, words):
    e = read_failure(status, body, "https://store/x", "team", via)
    assert type(e) is cls and words in str(e), str(e)


def test_logs_by_rank_and_the_only_one():
    k = FakeKube()
    wb = binding(nodes=[{"rank": 0, "podName": "job-node-0"}],
                 artifacts={"logs": ["jid/.tether/logs/job-node-0.log"]})
    k.on("GET", "/apis/tether.dev/v1alpha1/namespaces/team/workerbindings/job", wb)
    c = client(k, FakeReader({".tether/logs/job-node-0.log": b"hello\n"}))
    assert c.log_pods(wb) == ["job-node-0"]
    assert b"".join(c.logs("team", "job", rank=0).stream()) == b"hello\n"
    assert b"".join(c.logs("team", "job").stream()) == b"hello\n"
    with pytest.raises(tether.LogNotFound, match="no archived log of pod other"):
        c.logs("team", "job", pod="other")


def test_logs_of_an_earlier_attempt_by_the_exit_that_ended_it():
    k = FakeKube()
    wb = binding(attempt=2, nodes=[{"rank": 1, "podName": "job-node-1-b",
                                    "lastExit": {"rank": 1, "attempt": 1, "podName": "job-node-1-a", "exitCode": 1}}],
                 artifacts={"logs": ["jid/.tether/logs/job-node-1-a.log"]})
    k.on("GET", "/apis/tether.dev/v1alpha1/namespaces/team/workerbindings/job", wb)
    c = client(k, FakeReader({".tether/logs/job-node-1-a.log": b"attempt one\n"}))
    assert b"".join(c.logs("team", "job", rank=1, attempt=1).stream()) == b"attempt one\n"
    with pytest.raises(tether.LogNotFound, match="no archived log of pod job-node-1-b"):
        c.logs("team", "job", rank=1, attempt=2)
    with pytest.raises(tether.LogNotFound, match="records no pod of node 1 in attempt 0"):
        c.logs("team", "job", rank=1, attempt=0)


def test_the_token_for_the_binding_service_from_either_scheme():
    from tether.reads import token_of

    class Cfg:
        def __init__(self, key):
            self.api_key, self.refresh_api_key_hook = {"authorization": key}, None

    class Api:
        def __init__(self, key):
            self.configuration = Cfg(key)
    assert token_of(Api("Bearer abc"))() == "abc" and token_of(Api("bearer abc"))() == "abc"
