import hashlib
import os

import pytest

import tether
from fakes import FakeKube, FakeReader, binding, client, manifest

FILES = {"model.pt": b"weights" * 100, "ckpt/step-1.pt": b"ckpt-bytes"}
NODE1 = {"log.txt": b"rank one"}


def bound(objects=None, sha=None, **node0):
    m0, m1 = manifest(FILES), manifest(NODE1)
    objs = {"manifest.json": m0, "nodes/1/manifest.json": m1, "model.pt": FILES["model.pt"],
            "ckpt/step-1.pt": FILES["ckpt/step-1.pt"], "nodes/1/log.txt": NODE1["log.txt"]}
    objs.update(objects or {})
    a0 = {"manifest": "jid/manifest.json", "manifestSHA256": sha if sha is not None else hashlib.sha256(m0).hexdigest(),
          "verified": True}
    a0.update(node0)
    wb = binding(phase="Succeeded", nodes=[
        {"rank": 0, "artifacts": a0},
        {"rank": 1, "artifacts": {"manifest": "jid/nodes/1/manifest.json",
                                  "manifestSHA256": hashlib.sha256(m1).hexdigest(), "verified": True}}])
    k = FakeKube()
    k.on("GET", "/apis/tether.dev/v1alpha1/namespaces/team/workerbindings/job", wb)
    return client(k, FakeReader(objs))


def test_list_reads_every_nodes_manifest():
    got = bound(missing=["ckpt/step-1.pt"]).artifacts.list("team", "job")
    assert [(a.rank, a.path, a.size, a.verified) for a in got] == [
        (0, "model.pt", 700, True), (0, "ckpt/step-1.pt", 10, False), (1, "nodes/1/log.txt", 8, True)]
    assert got[0].md5 == hashlib.md5(FILES["model.pt"]).hexdigest()


def test_a_changed_manifest_is_refused_naming_both_digests():
    with pytest.raises(tether.ManifestDigestMismatch) as e:
        bound(sha="ab" * 32).artifacts.list("team", "job")
    assert e.value.want == "ab" * 32 and e.value.got == hashlib.sha256(manifest(FILES)).hexdigest()
    with pytest.raises(tether.ManifestDigestMismatch, match="no SHA-256 recorded"):
        bound(sha="").artifacts.list("team", "job")


def test_download_verified_file(tmp_path):
    c = bound()
    dest = tmp_path / "m.pt"
    got = c.artifacts.download("team", "job", "model.pt", str(dest))
    assert dest.read_bytes() == FILES["model.pt"] and got[0].path == "model.pt"
    assert os.listdir(tmp_path) == ["m.pt"]


def test_download_all_keeps_paths(tmp_path):
    got = bound().artifacts.download("team", "job", all=True, dest=str(tmp_path))
    assert len(got) == 3
    assert (tmp_path / "ckpt" / "step-1.pt").read_bytes() == FILES["ckpt/step-1.pt"]
    assert (tmp_path / "nodes" / "1" / "log.txt").read_bytes() == NODE1["log.txt"]


@pytest.mark.parametrize("stored", [b"weightz" * 100, b"weights" * 101, b"weights"], ids=["changed", "longer", "shorter"])
def test_a_changed_object_is_refused_and_nothing_written(tmp_path, stored):
    c = bound(objects={"model.pt": stored})
    with pytest.raises(tether.ArtifactDigestMismatch) as e:
        c.artifacts.download("team", "job", "model.pt", str(tmp_path / "m.pt"))
    assert e.value.path == "model.pt" and e.value.want_md5 == hashlib.md5(FILES["model.pt"]).hexdigest()
    assert "model.pt" in str(e.value)
    if len(stored) == 700:
        assert e.value.got_md5 == hashlib.md5(stored).hexdigest() and e.value.got_md5 in str(e.value)
    assert os.listdir(tmp_path) == []


def test_unverified_or_unknown_paths_are_not_downloaded(tmp_path):
    c = bound(missing=["model.pt"])
    with pytest.raises(tether.ArtifactNotFound, match="not verified"):
        c.artifacts.download("team", "job", "model.pt", str(tmp_path / "m"))
    with pytest.raises(tether.ArtifactNotFound, match="no artifact nope"):
        c.artifacts.download("team", "job", "nope", str(tmp_path / "m"))
