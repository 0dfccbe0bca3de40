package client

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/upload"
)

// Artifact is one file a node's manifest lists.
type Artifact struct {
	// Rank is the node that uploaded it.
	Rank int32 `json:"rank"`
	// Path is relative to the job's prefix: <path> for rank 0,
	// nodes/<rank>/<path> for the others (what Download takes).
	Path string `json:"path"`
	Size int64  `json:"size"`
	// MD5 is the lowercase hex MD5 the manifest lists.
	MD5 string `json:"md5"`
	// Verified is true when the binding server verified the node's
	// manifest and did not name this file missing.
	Verified bool `json:"verified"`
}

// ManifestDigestError is a stored manifest that is not the one the binding
// server verified: its SHA-256 is not the one the binding recorded, or the
// binding records none (every verdict of the control plane carries one).
type ManifestDigestError struct {
	Rank      int32
	Key       string
	Want, Got string
	// Final is whether the binding had succeeded: before, the latest
	// manifest may still wait under its pending key.
	Final bool
}

func (e *ManifestDigestError) Error() string {
	if e.Want == "" {
		return fmt.Sprintf("node %d's manifest %s has no SHA-256 recorded on the binding, and the control plane records one with every verdict: the status was not written by it; refusing the manifest and the files it lists",
			e.Rank, e.Key)
	}
	msg := fmt.Sprintf("node %d's manifest %s has SHA-256 %s, but the binding recorded %s when it was verified: the stored manifest was changed; refusing it and the files it lists",
		e.Rank, e.Key, e.Got, e.Want)
	if !e.Final {
		msg += " (before the binding succeeds, a newer manifest may still wait to be promoted: read again once it is Succeeded)"
	}
	return msg
}

// Artifacts lists the files of every bound node's current manifest, rank
// by rank. A node without a manifest yet contributes nothing. Each manifest
// is checked against the SHA-256 the binding recorded with its verdict: a
// manifest changed in the store, or one without a recorded SHA-256, is a
// *ManifestDigestError.
func (c *Client) Artifacts(ctx context.Context, wb *tetherv1.WorkerBinding) ([]Artifact, error) {
	var out []Artifact
	for _, n := range wb.Status.Nodes {
		a := n.Artifacts
		if a == nil || a.Manifest == "" {
			continue
		}
		// A node's files are what its own manifest lists: no other key is
		// read as one.
		if want := upload.ManifestKey(wb.Spec.JobID, int(n.Rank)); a.Manifest != want {
			return nil, fmt.Errorf("node %d's manifest key %q is not the node's manifest key %s", n.Rank, a.Manifest, want)
		}
		rel := strings.TrimPrefix(a.Manifest, wb.Spec.JobID+"/")
		body, err := c.open(ctx, wb, rel)
		if err != nil {
			return nil, fmt.Errorf("node %d's manifest: %w", n.Rank, err)
		}
		raw, err := io.ReadAll(io.LimitReader(body, upload.MaxManifestSize+1))
		_ = body.Close()
		if err != nil {
			return nil, fmt.Errorf("node %d's manifest %s: %w", n.Rank, a.Manifest, err)
		}
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); got != a.ManifestSHA256 {
			return nil, &ManifestDigestError{Rank: n.Rank, Key: a.Manifest, Want: a.ManifestSHA256, Got: got, Final: wb.Status.Phase == tetherv1.PhaseSucceeded}
		}
		var m upload.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("node %d's manifest %s: %w", n.Rank, a.Manifest, err)
		}
		prefix := upload.NodePrefix(int(n.Rank))
		for _, f := range m.Files {
			p := prefix + f.Path
			out = append(out, Artifact{Rank: n.Rank, Path: p, Size: f.Size, MD5: f.MD5,
				Verified: a.Verified && !slices.Contains(a.Missing, p) && !slices.Contains(a.Missing, f.Path)})
		}
	}
	return out, nil
}

// DigestError is a download whose content is not what the manifest lists.
type DigestError struct {
	Path              string
	WantMD5, GotMD5   string
	WantSize, GotSize int64
}

func (e *DigestError) Error() string {
	if e.WantSize != e.GotSize {
		return fmt.Sprintf("artifact %s: %d bytes read, the manifest lists %d: the stored object was changed or truncated; refusing it", e.Path, e.GotSize, e.WantSize)
	}
	return fmt.Sprintf("artifact %s: MD5 %s, the manifest lists %s: the stored object was changed; refusing it", e.Path, e.GotMD5, e.WantMD5)
}

// Find returns the verified artifact at path (relative to the job's prefix).
func (c *Client) Find(ctx context.Context, wb *tetherv1.WorkerBinding, path string) (Artifact, error) {
	list, err := c.Artifacts(ctx, wb)
	if err != nil {
		return Artifact{}, err
	}
	for _, a := range list {
		if a.Path == path {
			if !a.Verified {
				return a, fmt.Errorf("artifact %s of %s/%s is not verified (its node's manifest names it missing or is not verified): refusing to download it", path, wb.Namespace, wb.Name)
			}
			return a, nil
		}
	}
	return Artifact{}, fmt.Errorf("no artifact %s in the manifests of %s/%s (kubectl tether artifacts ls lists them)", path, wb.Namespace, wb.Name)
}

// Download writes the verified artifact at path to w and checks its size
// and MD5 against the manifest. Bytes already written when the check fails
// are the caller's to discard (DownloadFile does).
func (c *Client) Download(ctx context.Context, wb *tetherv1.WorkerBinding, path string, w io.Writer) (Artifact, error) {
	a, err := c.Find(ctx, wb, path)
	if err != nil {
		return a, err
	}
	body, err := c.open(ctx, wb, path)
	if err != nil {
		return a, err
	}
	defer body.Close()
	h := md5.New()
	// One byte past the size, so a longer object is noticed.
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(body, a.Size+1))
	if err != nil {
		return a, fmt.Errorf("artifact %s: %w", path, err)
	}
	return a, check(a, n, h)
}

func check(a Artifact, n int64, h hash.Hash) error {
	got := hex.EncodeToString(h.Sum(nil))
	if n != a.Size || got != a.MD5 {
		return &DigestError{Path: a.Path, WantMD5: a.MD5, GotMD5: got, WantSize: a.Size, GotSize: n}
	}
	return nil
}

// DownloadFile downloads the verified artifact at path into dest, which
// appears only once its MD5 matched (written next to it, then renamed).
func (c *Client) DownloadFile(ctx context.Context, wb *tetherv1.WorkerBinding, path, dest string) (Artifact, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.part")
	if err != nil {
		return Artifact{}, err
	}
	// Gone once renamed into place; removed here on every other path.
	defer func() { _ = os.Remove(tmp.Name()) }()
	a, err := c.Download(ctx, wb, path, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return a, err
	}
	return a, os.Rename(tmp.Name(), dest)
}

// Log opens the archived trainer log of pod (status.artifacts.logs).
func (c *Client) Log(ctx context.Context, wb *tetherv1.WorkerBinding, pod string) (io.ReadCloser, error) {
	if a := wb.Status.Artifacts; a != nil {
		if key := upload.LogKey(wb.Spec.JobID, pod); slices.Contains(a.Logs, key) {
			return c.open(ctx, wb, strings.TrimPrefix(key, wb.Spec.JobID+"/"))
		}
	}
	return nil, fmt.Errorf("no archived log of pod %s in %s/%s (status.artifacts.logs lists them; a log is archived once the trainer container terminated)", pod, wb.Namespace, wb.Name)
}

// LogPods are the pods whose trainer logs are archived, in the order listed.
func LogPods(wb *tetherv1.WorkerBinding) []string {
	var pods []string
	if a := wb.Status.Artifacts; a != nil {
		for _, k := range a.Logs {
			p := strings.TrimPrefix(strings.TrimPrefix(k, wb.Spec.JobID+"/"), upload.LogsDir)
			pods = append(pods, strings.TrimSuffix(p, ".log"))
		}
	}
	return pods
}

// open reads the stored object at rel (relative to the job's prefix).
// Through the API server the control plane streams it (names.HeaderStream
// asks control planes that predate that rule to stream too): the API
// server passes no redirect on, and the caller may not reach the store.
// From the binding Service, a redirect to a presigned URL of the store is
// followed, without the caller's token.
func (c *Client) open(ctx context.Context, wb *tetherv1.WorkerBinding, rel string) (io.ReadCloser, error) {
	u := *c.read
	u.Path = c.readPrefix + wb.Namespace + "/workerbindings/" + wb.Name + "/objects/" + rel
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.viaAPIServer {
		req.Header.Set(names.HeaderStream, "true")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return resp.Body, nil
	case resp.StatusCode == http.StatusTemporaryRedirect && !c.viaAPIServer:
		_ = resp.Body.Close()
		return c.openPresigned(ctx, resp.Header.Get("Location"))
	}
	defer resp.Body.Close()
	return nil, c.readFailure(resp, wb.Namespace)
}

func (c *Client) openPresigned(ctx context.Context, loc string) (io.ReadCloser, error) {
	u, err := url.Parse(loc)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("read endpoint redirected to %q: not an http(s) URL", loc)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.store.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the presigned URL from the store: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("the store answered the presigned URL with %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return resp.Body, nil
}
