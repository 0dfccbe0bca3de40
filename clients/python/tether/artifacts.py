"""A job's artifacts, read as pkg/client/artifacts.go reads them: every
node's manifest checked against the SHA-256 the binding recorded with its
verdict, each file's size and MD5 checked while it streams, and a download
written to a temporary file that is renamed into place only once verified."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, List, Optional

from . import errors, names

if TYPE_CHECKING:
    from .client import Client

CHUNK = 1 << 20


@dataclass(frozen=True)
class Artifact:
    """One file a node's manifest lists."""

    #: The node that uploaded it.
    rank: int
    #: Relative to the job's prefix: <path> for rank 0, nodes/<rank>/<path> for the others.
    path: str
    size: int
    #: The lowercase hex MD5 the manifest lists.
    md5: str
    #: The binding server verified the node's manifest and did not name this file missing.
    verified: bool


class Artifacts:
    """``client.artifacts``: list and download a bound job's files."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def _binding(self, namespace: str, name: str, binding: Optional[dict[str, Any]]) -> dict[str, Any]:
        return binding if binding is not None else self._client.get(namespace, name)

    def list(self, namespace: str, name: str, binding: Optional[dict[str, Any]] = None) -> list[Artifact]:
        """The files of every bound node's current manifest, rank by rank (a
        node without a manifest yet contributes nothing). A manifest changed
        in the store, or one without a recorded SHA-256, raises
        ManifestDigestMismatch. binding: an already read WorkerBinding."""
        wb = self._binding(namespace, name, binding)
        job = wb.get("spec", {}).get("jobID", "")
        status = wb.get("status") or {}
        out: list[Artifact] = []
        for node in status.get("nodes") or []:
            rank = int(node.get("rank", 0))
            a = node.get("artifacts") or {}
            if not a.get("manifest"):
                continue
            want_key = names.manifest_key(job, rank)
            if a["manifest"] != want_key:
                raise errors.TetherError(
                    f"node {rank}'s manifest key {a['manifest']!r} is not the node's manifest key {want_key}")
            body = self._client.reader.open(namespace, name, a["manifest"].removeprefix(job + "/"))
            try:
                raw = b"".join(_limited(body, names.MAX_MANIFEST_SIZE + 1))
            finally:
                body.release_conn()
            got = hashlib.sha256(raw).hexdigest()
            if got != a.get("manifestSHA256", ""):
                raise errors.ManifestDigestMismatch(rank, a["manifest"], a.get("manifestSHA256", ""), got,
                                                    status.get("phase") == names.PHASE_SUCCEEDED)
            try:
                manifest = json.loads(raw)
            except ValueError as e:
                raise errors.TetherError(f"node {rank}'s manifest {a['manifest']}: {e}") from None
            missing = a.get("missing") or []
            prefix = names.node_prefix(rank)
            for f in manifest.get("files") or []:
                p = prefix + f["path"]
                out.append(Artifact(rank=rank, path=p, size=int(f.get("size", 0)), md5=f.get("md5", ""),
                                    verified=bool(a.get("verified")) and p not in missing and f["path"] not in missing))
        return out

    def find(self, namespace: str, name: str, path: str, binding: Optional[dict[str, Any]] = None) -> Artifact:
        """The verified artifact at path (relative to the job's prefix)."""
        for a in self.list(namespace, name, binding):
            if a.path == path:
                if not a.verified:
                    raise errors.ArtifactNotFound(
                        f"artifact {path} of {namespace}/{name} is not verified (its node's manifest names it missing "
                        f"or is not verified): refusing to download it")
                return a
        raise errors.ArtifactNotFound(f"no artifact {path} in the manifests of {namespace}/{name} "
                                      f"(client.artifacts.list or kubectl tether artifacts ls lists them)")

    def copy(self, namespace: str, name: str, artifact: Artifact, out: BinaryIO) -> None:
        """Writes artifact to out, checking its size and MD5 against the
        manifest (ArtifactDigestMismatch); bytes already written when the
        check fails are the caller's to discard (download does)."""
        body = self._client.reader.open(namespace, name, artifact.path)
        h = hashlib.md5()
        n = 0
        try:
            # One byte past the size, so a longer object is noticed.
            for chunk in _limited(body, artifact.size + 1):
                h.update(chunk)
                out.write(chunk)
                n += len(chunk)
        finally:
            body.release_conn()
        got = h.hexdigest()
        if n != artifact.size or got != artifact.md5:
            raise errors.ArtifactDigestMismatch(artifact.path, artifact.md5, got, artifact.size, n)

    def download(self, namespace: str, name: str, path: Optional[str] = None, dest: str = ".", *,
                 all: bool = False, binding: Optional[dict[str, Any]] = None) -> List[Artifact]:
        """Downloads the verified artifact at path to dest (a file, or an
        existing directory to put it in), or with all=True every verified
        artifact under the directory dest (keeping their paths). Each file
        appears only once its size and MD5 matched the manifest: it is
        written next to its destination and renamed into place. Returns what
        was downloaded."""
        if (path is None) == (not all):
            raise ValueError("download takes a path or all=True")
        wb = self._binding(namespace, name, binding)
        if not all:
            assert path is not None
            a = self.find(namespace, name, path, wb)
            target = os.path.join(dest, os.path.basename(path)) if os.path.isdir(dest) else dest
            self._to_file(namespace, name, a, target)
            return [a]
        done = []
        for a in self.list(namespace, name, wb):
            if not a.verified:
                continue
            target = os.path.join(dest, *a.path.split("/"))
            if os.path.commonpath([os.path.abspath(target), os.path.abspath(dest)]) != os.path.abspath(dest):
                raise errors.TetherError(f"artifact path {a.path!r} leaves the destination directory: refusing it")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            self._to_file(namespace, name, a, target)
            done.append(a)
        return done

    def _to_file(self, namespace: str, name: str, a: Artifact, dest: str) -> None:
        d = os.path.dirname(os.path.abspath(dest))
        fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(dest) + ".", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                self.copy(namespace, name, a, f)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _limited(body: Any, limit: int) -> Any:
    """body's chunks, at most limit bytes in all."""
    left = limit
    for chunk in body.stream(CHUNK, decode_content=True):
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk[:left])
