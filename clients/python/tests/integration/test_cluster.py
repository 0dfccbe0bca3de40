"""The client against a real API server and Tether's control plane, run by
test/integration/python (go test), which sets the TETHER_IT_* variables:
a tenant's kubeconfig (its namespace's Role and tether-artifact-reader), a
second one that may read bindings only, a finished job whose files were
uploaded (one of them overwritten in the store since), and a running job
whose sidecar acknowledges every command."""

import hashlib
import json
import os

import pytest

import tether

pytestmark = pytest.mark.skipif(not os.environ.get("TETHER_IT_KUBECONFIG"),
                                reason="needs the cluster test/integration/python starts (go test ./test/integration/python)")

NS = os.environ.get("TETHER_IT_NAMESPACE", "")
DONE = os.environ.get("TETHER_IT_DONE", "")
RUNNING = os.environ.get("TETHER_IT_RUNNING", "")
TAMPERED = os.environ.get("TETHER_IT_TAMPERED", "")


@pytest.fixture(scope="module")
def c() -> tether.Client:
    return tether.Client(os.environ["TETHER_IT_KUBECONFIG"])


@pytest.fixture(scope="module")
def limited() -> tether.Client:
    return tether.Client(os.environ["TETHER_IT_LIMITED_KUBECONFIG"])


def files() -> dict:
    return json.loads(os.environ["TETHER_IT_FILES"])


def test_the_installed_package_runs():
    assert tether.__file__.startswith(os.environ["TETHER_IT_VENV"]), tether.__file__


def test_cancel_without_permission_to_stop_sends_nothing(c, limited):
    with pytest.raises(tether.Forbidden) as e:
        limited.cancel(NS, RUNNING, timeout=10)
    assert e.value.namespace == NS and e.value.resource == "workloads.kueue.x-k8s.io", str(e.value)
    assert "nothing was sent" in str(e.value)
    wb = c.get(NS, RUNNING)
    assert tether.names.COMMAND_ANNOTATION not in (wb["metadata"].get("annotations") or {})
    assert wb["status"]["phase"] == tether.names.PHASE_RUNNING and "lastCommand" not in wb["status"]


def test_watch_resumes_from_a_resource_version(c):
    before = c.get(NS, RUNNING)["metadata"]["resourceVersion"]
    status = c.flush(NS, RUNNING, timeout=30)
    assert status["state"] == tether.names.COMMAND_ACKNOWLEDGED and status["name"] == tether.FLUSH
    # Everything after `before` is delivered, though it happened before the watch began.
    seen = []
    for ev in c.watch(NS, RUNNING, resource_version=before, timeout=30):
        seen.append(ev)
        lc = ev.binding["status"].get("lastCommand") or {}
        if lc.get("id") == status["id"] and lc.get("state") == tether.names.COMMAND_ACKNOWLEDGED:
            break
    else:
        pytest.fail(f"the watch from {before} never delivered the acknowledged flush: {[e.resource_version for e in seen]}")
    assert {e.type for e in seen} == {"MODIFIED"}
    assert int(seen[0].resource_version) > int(before)


def test_watch_survives_an_expired_resource_version(c):
    # Older than anything the API server's watch cache holds: its 410 Gone
    # (too old resource version) is answered by re-listing.
    current = c.get(NS, RUNNING)
    for ev in c.watch(NS, RUNNING, resource_version="1", timeout=30):
        assert ev.type == "MODIFIED" and ev.binding["metadata"]["uid"] == current["metadata"]["uid"]
        assert int(ev.resource_version) >= int(current["metadata"]["resourceVersion"])
        break
    else:
        pytest.fail("the watch from an expired resource version delivered nothing")


def test_cancel_then_wait_with_a_callback(c):
    res = c.cancel(NS, RUNNING, timeout=30)
    assert res.stop.action == tether.STOP_SUSPEND_TRAINJOB and res.stop.name == RUNNING
    assert res.command is not None and res.command["state"] == tether.names.COMMAND_ACKNOWLEDGED
    from kubernetes import client as k8s
    tj = k8s.CustomObjectsApi(c.api_client).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", NS, "trainjobs", RUNNING)
    assert tj["spec"]["suspend"] is True
    seen = []
    wb = c.wait(NS, RUNNING, phase=tether.names.PHASE_FAILED, timeout=60,
                on_change=lambda b: seen.append((b["status"]["phase"], b["status"].get("reason"))))
    assert wb["status"]["reason"] == tether.names.REASON_CANCELLED
    assert seen and seen[-1] == (tether.names.PHASE_FAILED, tether.names.REASON_CANCELLED), seen
    # Final: a wait for another phase or an unmet outcome condition ends at once.
    with pytest.raises(tether.PhaseError, match="ended Failed"):
        c.wait(NS, RUNNING, phase=tether.names.PHASE_SUCCEEDED, timeout=30)
    with pytest.raises(tether.ConditionError):
        c.wait(NS, RUNNING, condition="Succeeded", timeout=30)


def test_list_and_download_verified_files_through_the_read_api(c, tmp_path):
    listed = {a.path: a for a in c.artifacts.list(NS, DONE)}
    assert set(listed) == set(files()) and all(a.verified for a in listed.values())
    for path, md5 in files().items():
        if path == TAMPERED:
            continue
        dest = tmp_path / path.replace("/", "_")
        c.artifacts.download(NS, DONE, path, str(dest))
        assert hashlib.md5(dest.read_bytes()).hexdigest() == md5 == listed[path].md5


def test_an_object_overwritten_in_the_store_is_refused(c, tmp_path):
    dest = tmp_path / "t.bin"
    with pytest.raises(tether.ArtifactDigestMismatch) as e:
        c.artifacts.download(NS, DONE, TAMPERED, str(dest))
    want, got = files()[TAMPERED], os.environ["TETHER_IT_TAMPERED_MD5"]
    assert (e.value.path, e.value.want_md5, e.value.got_md5) == (TAMPERED, want, got)
    assert TAMPERED in str(e.value) and want in str(e.value) and got in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_download_from_the_binding_service_with_the_token(tmp_path):
    c = tether.Client(os.environ["TETHER_IT_KUBECONFIG"], read_url=os.environ["TETHER_IT_READ_URL"],
                      read_ca=os.environ["TETHER_IT_READ_CA"])
    path, md5 = next((p, m) for p, m in files().items() if p != TAMPERED)
    c.artifacts.download(NS, DONE, path, str(tmp_path / "f"))
    assert hashlib.md5((tmp_path / "f").read_bytes()).hexdigest() == md5
    with pytest.raises(tether.ArtifactDigestMismatch):
        c.artifacts.download(NS, DONE, TAMPERED, str(tmp_path / "t"))


def test_a_reader_without_the_grant_is_told_which(limited):
    with pytest.raises(tether.ReadForbidden) as e:
        limited.artifacts.list(NS, DONE)
    assert "tether-artifact-reader" in str(e.value) and f"namespace {NS}" in str(e.value)
