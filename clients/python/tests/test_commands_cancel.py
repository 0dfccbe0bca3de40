import pytest

import tether
from fakes import FakeKube, binding, client
from tether.kube import APIError, bindings_path, trainjob_path

PATH = bindings_path("team", "job")
TJ = trainjob_path("team", "job")
FORBIDDEN = APIError(403, "Forbidden", 'trainjobs.trainer.kubeflow.org "job" is forbidden: User "tenant" cannot patch', {})


def acking(k, state="Acknowledged", phase="Running"):
    """The binding answers every command it is sent with state."""
    sent = {}

    def patch(query, body):
        sent["value"] = body["metadata"]["annotations"]["tether.dev/command"]
        return binding()
    k.on("PATCH", PATH, patch)

    def get(query, body):
        if "value" not in sent:
            return binding(phase=phase)
        name, cid = sent["value"].split(":")
        return binding(phase=phase, lastCommand={"id": cid, "name": name, "state": state, "message": "disk full",
                                                 "sentNodes": [0, 1], "ackedNodes": [0]})
    k.on("GET", PATH, get)
    return sent


def test_send_annotates_the_binding_with_a_fresh_id_by_merge_patch():
    k = FakeKube()
    k.on("PATCH", PATH, binding())
    c = client(k)
    a, b = c.send("team", "job", tether.FLUSH), c.send("team", "job", tether.FLUSH)
    assert a != b
    method, path, _, body, ctype = k.calls[0]
    assert (method, path, ctype) == ("PATCH", PATH, "application/merge-patch+json")
    assert body == {"metadata": {"annotations": {"tether.dev/command": "flush:" + a}}}
    with pytest.raises(ValueError):
        c.send("team", "job", "restart")


def test_flush_and_drain_wait_for_every_node_and_fail_typed():
    k = FakeKube()
    acking(k)
    assert client(k).flush("team", "job", timeout=5)["state"] == "Acknowledged"
    assert client(k).drain("team", "job", timeout=5)["name"] == "drain"
    k = FakeKube()
    acking(k, state="Failed")
    want = r"flush .* failed: disk full \(sent to nodes \[0, 1\], acknowledged by \[0\]\)"
    with pytest.raises(tether.CommandFailed, match=want):
        client(k).flush("team", "job", timeout=5)


def test_cancel_refused_by_the_dry_run_sends_nothing():
    k = FakeKube()
    k.on("GET", PATH, binding())
    k.on("GET", TJ, {"metadata": {"name": "job", "uid": "tj-uid"}})
    k.on("PATCH", TJ, FORBIDDEN)
    with pytest.raises(tether.Forbidden) as e:
        client(k).cancel("team", "job", timeout=5)
    assert (e.value.verb, e.value.resource, e.value.namespace) == ("patch", "trainjobs.trainer.kubeflow.org", "team")
    assert "nothing was sent" in str(e.value) and 'resources: ["trainjobs"]' in str(e.value)
    assert ("dryRun", "All") in k.calls[-1][2]
    assert not any(m == "PATCH" and p == PATH for m, p, *_ in k.calls)


def test_cancel_suspends_a_trainjob_without_kueue_after_the_acknowledgement():
    k = FakeKube()
    acking(k)
    k.on("GET", TJ, {"metadata": {"name": "job", "uid": "tj-uid"}})
    k.on("PATCH", TJ, {})
    res = client(k).cancel("team", "job", timeout=5)
    assert res.stop.action == tether.STOP_SUSPEND_TRAINJOB and res.command["state"] == "Acknowledged"
    patches = [(q, b) for m, p, q, b, _ in k.calls if m == "PATCH" and p == TJ]
    assert patches == [([("dryRun", "All")], {"spec": {"suspend": True}}), ([], {"spec": {"suspend": True}})]
    order = [p for m, p, *_ in k.calls if m == "PATCH"]
    assert order == [TJ, PATH, TJ]  # dry run, the command, the stop


def test_cancel_deactivates_the_kueue_workload_found_by_owner_reference():
    k = FakeKube()
    acking(k)
    k.on("GET", TJ, {"metadata": {"name": "job", "uid": "tj-uid", "labels": {"kueue.x-k8s.io/queue-name": "q"}}})
    k.on("GET", "/apis/kueue.x-k8s.io", {"preferredVersion": {"version": "v1beta2"}})
    wls = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/workloads"
    k.on("GET", wls, {"items": [{"metadata": {"name": "other", "labels": {"kueue.x-k8s.io/job-uid": "x"}}},
                                {"metadata": {"name": "wl", "ownerReferences": [{"uid": "tj-uid"}]}}]})
    k.on("PATCH", wls + "/wl", {})
    res = client(k).cancel("team", "job", timeout=5)
    assert (res.stop.action, res.stop.name) == (tether.STOP_DEACTIVATE_WORKLOAD, "wl")
    assert [b for m, p, q, b, _ in k.calls if p == wls + "/wl"] == [{"spec": {"active": False}}] * 2


def test_cancel_whose_flush_failed_still_stops_and_names_unverified_files():
    k = FakeKube()
    acking(k, state="Failed")
    k.on("GET", TJ, {"metadata": {"name": "job", "uid": "tj-uid"}})
    k.on("DELETE", TJ, {})
    orig = k.handlers[("GET", PATH)]

    def with_missing(q, b):
        wb = orig(q, b)
        wb["status"]["nodes"] = [{"rank": 0, "artifacts": {"manifest": "jid/manifest.json", "missing": ["ckpt/a.pt"],
                                                           "missingCount": 3, "lastError": "PUT ckpt/a.pt: 500"}}]
        return wb
    k.on("GET", PATH, with_missing)
    with pytest.raises(tether.CancelFlushError) as e:
        client(k).cancel("team", "job", timeout=5, delete=True)
    r = e.value.result
    assert r.stop.action == tether.STOP_DELETE_TRAINJOB
    assert r.unverified == ["ckpt/a.pt"] and r.unverified_count == 3
    assert "ckpt/a.pt and 2 more" in str(e.value) and "PUT ckpt/a.pt: 500" in str(e.value)
    deletes = [(q, b) for m, p, q, b, _ in k.calls if m == "DELETE"]
    assert [q for q, _ in deletes] == [[("dryRun", "All")], []]
    assert deletes[1][1]["preconditions"] == {"uid": "tj-uid"}


def test_cancel_of_a_final_binding_stops_nothing():
    k = FakeKube()
    k.on("GET", PATH, binding(phase="Succeeded"))
    with pytest.raises(tether.PhaseError, match="a finished job has nothing to flush or stop"):
        client(k).cancel("team", "job")
    assert [m for m, *_ in k.calls] == ["GET"]
