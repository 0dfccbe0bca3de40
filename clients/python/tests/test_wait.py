import pytest

import tether
from fakes import FakeKube, binding, client
from tether.kube import APIError, bindings_path

PATH = bindings_path("team", "job")
LIST = bindings_path("team")


def ev(typ, b):
    return {"type": typ, "object": b}


def test_watch_resumes_from_the_given_resource_version_and_renews_from_the_last_seen():
    k = FakeKube()
    k.streams = [[ev("MODIFIED", binding(rv="11")), ev("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
                 [ev("MODIFIED", binding(rv="16", phase="Succeeded"))]]
    got = []
    for e in client(k).watch("team", "job", resource_version="10", timeout=5):
        got.append(e.resource_version)
        if len(got) == 2:
            break
    assert got == ["11", "16"]
    assert ("resourceVersion", "10") in k.watch_queries[0]
    assert ("fieldSelector", "metadata.name=job") in k.watch_queries[0]
    # The bookmark's version is where the renewed watch starts.
    assert ("resourceVersion", "15") in k.watch_queries[1]


@pytest.mark.parametrize("expiry", ["event", "answer"])
def test_watch_relists_after_expiry(expiry):
    k = FakeKube()
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    first = [ev("ERROR", gone)] if expiry == "event" else APIError(410, "Expired", "too old", gone)
    k.streams = [first, [ev("MODIFIED", binding(rv="31", phase="Finishing"))]]
    k.on("GET", LIST, {"metadata": {"resourceVersion": "30"}, "items": [binding(rv="30")]})
    events = []
    for e in client(k).watch("team", "job", resource_version="5", timeout=5):
        events.append((e.type, e.resource_version))
        if len(events) == 2:
            break
    assert events == [("MODIFIED", "30"), ("MODIFIED", "31")]
    assert ("fieldSelector", "metadata.name=job") in k.calls[-1][2]
    assert ("resourceVersion", "30") in k.watch_queries[1]


def test_relist_reports_a_binding_gone_meanwhile_as_deleted():
    k = FakeKube()
    k.streams = [[ev("ADDED", binding(rv="2"))], [ev("ERROR", {"code": 410})]]
    k.on("GET", LIST, {"metadata": {"resourceVersion": "9"}, "items": []})
    events = []
    for e in client(k).watch("team", "job", timeout=5):
        events.append(e.type)
        if len(events) == 2:
            break
    assert events == ["ADDED", "DELETED"]


def test_wait_phase_returns_at_once_when_met_and_calls_back_each_version():
    k = FakeKube()
    k.on("GET", PATH, binding(rv="3"))
    k.streams = [[ev("MODIFIED", binding(rv="3")), ev("MODIFIED", binding(rv="4", phase="Finishing")),
                  ev("MODIFIED", binding(rv="5", phase="Succeeded"))]]
    seen = []
    got = client(k).wait("team", "job", phase="Succeeded", timeout=5,
                         on_change=lambda b: seen.append((b["metadata"]["resourceVersion"], b["status"]["phase"])))
    assert got["status"]["phase"] == "Succeeded"
    assert seen == [("3", "Running"), ("4", "Finishing"), ("5", "Succeeded")]
    assert ("resourceVersion", "3") in k.watch_queries[0]


def test_wait_phase_ends_early_with_a_phase_error_on_another_final_phase():
    k = FakeKube()
    k.on("GET", PATH, binding(phase="Failed", reason="TrainerFailed", message="exit 1"))
    with pytest.raises(tether.PhaseError) as e:
        client(k).wait("team", "job", phase="Succeeded", timeout=5)
    assert (e.value.got, e.value.want, e.value.reason) == ("Failed", "Succeeded", "TrainerFailed")
    assert "ended Failed (TrainerFailed: exit 1), not Succeeded" in str(e.value)


def test_wait_condition_case_insensitive_and_outcome_condition_ends_early():
    k = FakeKube()
    k.on("GET", PATH, binding(conditions=[{"type": "Ready", "status": "True"}]))
    assert client(k).wait("team", "job", condition="Ready=true", timeout=5)
    k.on("GET", PATH, binding(phase="Succeeded", reason="TrainerSucceeded",
                              conditions=[{"type": "Stalled", "status": "False"}]))
    with pytest.raises(tether.ConditionError) as e:
        client(k).wait("team", "job", condition="Stalled=True", timeout=5)
    assert (e.value.condition, e.value.got, e.value.want) == ("Stalled", "False", "True")
    with pytest.raises(tether.ConditionError, match="predates the outcome conditions"):
        client(k).wait("team", "job", condition="Ready", timeout=5)


def test_wait_non_outcome_condition_waits_until_timeout():
    k = FakeKube()
    k.on("GET", PATH, binding(phase="Succeeded"))
    with pytest.raises(tether.Timeout) as e:
        client(k).wait("team", "job", condition="HeartbeatLost", timeout=0.01)
    assert "condition HeartbeatLost=True" in str(e.value)


def test_wait_for_a_binding_not_created_yet_and_one_deleted():
    k = FakeKube()
    k.streams = [[ev("ADDED", binding(rv="7", phase="Running"))]]
    assert client(k).wait("team", "job", phase="Running", timeout=5)["metadata"]["resourceVersion"] == "7"
    assert not any(q[0] == "resourceVersion" for q in k.watch_queries[0])
    k.streams = [[ev("DELETED", binding(rv="8"))]]
    with pytest.raises(tether.BindingDeleted):
        client(k).wait("team", "job", phase="Succeeded", timeout=5)


def test_wait_timeout_on_a_missing_binding_says_it_does_not_exist():
    with pytest.raises(tether.Timeout, match="which does not exist .*tether.dev/bind=true"):
        client(FakeKube()).wait("team", "job", phase="Running", timeout=0.01)


def test_wait_takes_exactly_one_of_condition_or_phase():
    with pytest.raises(ValueError):
        client(FakeKube()).wait("team", "job")
    with pytest.raises(ValueError):
        client(FakeKube()).wait("team", "job", phase="Done")


def test_get_of_a_missing_binding_is_not_bound():
    with pytest.raises(tether.NotBound, match="tether.dev/bind=true"):
        client(FakeKube()).get("team", "job")
