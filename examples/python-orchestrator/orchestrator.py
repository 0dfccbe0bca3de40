"""A Python orchestrator on Tether: train a job in a Kueue queue, follow its
progress, download its verified model, cancel a second job and see its
quota freed. Uses only the tether package and kubernetes; see README.md."""

from __future__ import annotations

import argparse
import hashlib
import io
import shlex
import sys
from typing import Any

import tether
from kubernetes import client as k8s, watch


def trainjob(a: argparse.Namespace, name: str, args: str) -> dict[str, Any]:
    res = {"cpu": a.cpu, "memory": a.memory}
    trainer = {"image": a.image, "numNodes": 1, "resourcesPerNode": {"requests": res, "limits": res}}
    for key, words in (("command", shlex.split(a.command)), ("args", shlex.split(args))):
        if words:  # else the runtime's own
            trainer[key] = words
    return {"apiVersion": f"{tether.names.TRAINJOB_GROUP}/{tether.names.TRAINJOB_VERSION}", "kind": "TrainJob",
            "metadata": {"name": name, "labels": {**tether.BIND_LABELS, tether.names.KUEUE_QUEUE_LABEL: a.queue}},
            "spec": {"runtimeRef": {"name": a.runtime}, "trainer": trainer}}


def admitted(wl: dict[str, Any]) -> bool:
    conds = (wl.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Admitted", "QuotaReserved") and c["status"] == "True" for c in conds)


def wait_quota_freed(c: tether.Client, stop: tether.Stop, timeout: int) -> None:
    version = stop.path.split("/")[3]  # /apis/kueue.x-k8s.io/<version>/namespaces/...: the one cancel used
    api = k8s.CustomObjectsApi(c.api_client)
    for ev in watch.Watch().stream(api.list_namespaced_custom_object, tether.names.KUEUE_GROUP, version,
                                   stop.namespace, "workloads", field_selector="metadata.name=" + stop.name,
                                   timeout_seconds=timeout):
        if ev["type"] == "ERROR":
            raise tether.TetherError(f"watching Workload {stop.namespace}/{stop.name}: {ev['object']}")
        if ev["type"] == "DELETED" or not admitted(ev["object"]):
            return
    raise tether.TetherError(f"Workload {stop.namespace}/{stop.name} still admitted after {timeout}s")


def run(a: argparse.Namespace) -> None:
    c = tether.Client(a.kubeconfig)
    if a.read_other:  # another team's job: the read API must refuse this tenant
        ns, name = a.read_other.split("/", 1)
        c.artifacts.copy(ns, name, tether.Artifact(0, a.model, 0, "", True), io.BytesIO())
        raise tether.TetherError(f"read {a.model} of {ns}/{name}: the read API did not refuse it")
    api = k8s.CustomObjectsApi(c.api_client)
    train, stop = a.name + "-train", a.name + "-cancel"
    for name, args in ((train, a.args), (stop, a.cancel_args or a.args)):
        api.create_namespaced_custom_object(tether.names.TRAINJOB_GROUP, tether.names.TRAINJOB_VERSION, a.namespace,
                                            tether.names.TRAINJOB_PLURAL, trainjob(a, name, args))
        print(f"created TrainJob {a.namespace}/{name} in queue {a.queue}")

    def show(b: dict[str, Any]) -> None:
        p = c.progress(a.namespace, train)
        print(f"{train}: {b.get('status', {}).get('phase', 'Pending')} step={p.step} fraction={p.fraction}")
    c.wait(a.namespace, train, phase=tether.names.PHASE_SUCCEEDED, timeout=a.timeout, on_change=show)
    c.artifacts.download(a.namespace, train, a.model, a.out)  # size and MD5 checked against the manifest
    with open(a.out, "rb") as f:
        print(f"downloaded {a.model} to {a.out}: md5 {hashlib.md5(f.read()).hexdigest()} verified")

    c.wait(a.namespace, stop, condition=tether.names.CONDITION_READY, timeout=a.timeout)
    res = c.cancel(a.namespace, stop, timeout=a.timeout)
    print(f"cancelled {stop}: {res.stop}")
    if res.stop.action != tether.STOP_DEACTIVATE_WORKLOAD:
        raise tether.TetherError(f"{stop} was stopped without Kueue ({res.stop}): is {a.queue} a Kueue LocalQueue?")
    wait_quota_freed(c, res.stop, a.timeout)
    print(f"Workload {res.stop.name} no longer admitted: its quota is free")
    b = c.wait(a.namespace, stop, phase=tether.names.PHASE_FAILED, timeout=a.timeout)
    print(f"{stop}: {b['status']['phase']}/{b['status'].get('reason')}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kubeconfig")
    p.add_argument("--namespace", required=True)
    p.add_argument("--queue", required=True, help="Kueue LocalQueue")
    p.add_argument("--image", required=True)
    p.add_argument("--runtime", default="torch-distributed")
    p.add_argument("--command", default="", help="trainer command (shell words)")
    p.add_argument("--args", default="", help="trainer args of the job to train (shell words)")
    p.add_argument("--cancel-args", default="", help="trainer args of the job to cancel (default: --args)")
    p.add_argument("--cpu", default="250m")
    p.add_argument("--memory", default="256Mi")
    p.add_argument("--name", default="orchestrated")
    p.add_argument("--model", default="model/final.safetensors")
    p.add_argument("--out", default="model.safetensors")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--read-other", metavar="NS/NAME", help="only read NAME's model in NS (expect a refusal)")
    a = p.parse_args()
    try:
        run(a)
    except (tether.TetherError, tether.APIError, k8s.ApiException) as e:
        print(f"orchestrator: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
