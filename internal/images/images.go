// Package images builds Tether's OCI images without a container engine, with
// go-containerregistry: one layer holding a static binary (and, where the
// program needs them, CA roots and a /tmp), no shell, user 65532:65532, OCI
// media types and labels, and everything fixed by the inputs so that the same
// commit gives the same digest: file mtimes and the config's created time
// come from Meta.Created (the commit time), tar entries are sorted, owned by
// 0:0 with no host names or times, and the layer is gzipped without a header
// time.
//
// Write puts an image (or a multi-platform index) into an OCI image layout
// directory, for `crane push DIR REF`, and the same layout as a tar archive,
// for `ctr -n k8s.io images import FILE`; the index entry is named by the full
// reference (org.opencontainers.image.ref.name and io.containerd.image.name),
// so containerd imports it under that name with the manifest digest intact.
// hack/images is the command behind `make images`.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Source is the org.opencontainers.image.source label of every image.
const Source = "https://github.com/tether-dev/tether"

// User is the config's user: the non-root uid and gid Tether's manifests and
// its injected sidecar run as.
const User = "65532:65532"

// CACertsPath is where an image with Spec.CACerts has its CA roots: the
// first path Go's crypto/x509 reads on Linux.
const CACertsPath = "/etc/ssl/certs/ca-certificates.crt"

// OCI annotation and label keys.
const (
	AnnotationRefName       = "org.opencontainers.image.ref.name"
	AnnotationContainerName = "io.containerd.image.name"
	LabelSource             = "org.opencontainers.image.source"
	LabelRevision           = "org.opencontainers.image.revision"
	LabelVersion            = "org.opencontainers.image.version"
	LabelTitle              = "org.opencontainers.image.title"
	LabelDescription        = "org.opencontainers.image.description"
)

// Spec is one image: what it is called and what its layer holds besides the
// binary.
type Spec struct {
	// Repository is the image name without tag, e.g.
	// ghcr.io/tether-dev/tether-sidecar.
	Repository string
	// Package is the Go main package of the binary, e.g. ./cmd/sidecar.
	Package string
	// Binary, if set, is a prebuilt binary the image carries instead of a
	// package of this module: its name in hack/testbin.sh's directory
	// (e.g. versitygw, coredns); Package then only says where it comes from.
	Binary string
	// Entrypoint is the binary's absolute path in the image, e.g.
	// /tether-sidecar.
	Entrypoint string
	// Description is the org.opencontainers.image.description label.
	Description string
	// CACerts adds CA roots at CACertsPath (the Mozilla NSS roots of
	// golang.org/x/crypto/x509roots/fallback; roots carrying a constraint a
	// PEM file cannot express are left out), for a program that may reach a
	// public TLS endpoint such as S3.
	CACerts bool
	// Tmp adds a world-writable sticky /tmp (1777).
	Tmp bool
	// Test marks an image used only by Tether's own tests.
	Test bool
}

// Title is the image's short name, the last element of its repository
// (org.opencontainers.image.title, and the name of its files under the
// output directory).
func (s Spec) Title() string { return path.Base(s.Repository) }

// Meta is what every image of one build shares.
type Meta struct {
	Version  string    // the tag, and org.opencontainers.image.version
	Revision string    // git commit, org.opencontainers.image.revision
	Created  time.Time // the commit time: config created time and every file's mtime
}

// Ref is the image's reference at meta's version.
func (s Spec) Ref(meta Meta) string { return s.Repository + ":" + meta.Version }

// Specs are Tether's images: the control plane and the sidecar, then the
// two test images of the local cluster's real node (the trainer stand-in
// and the sandbox "pause" program). Their repositories are under registry
// (version.Registry).
func Specs(registry string) []Spec {
	return []Spec{
		{Repository: registry + "/tether-control-plane", Package: "./cmd/tether-control-plane", Entrypoint: "/tether-control-plane",
			Description: "Tether control plane: admission webhooks, binding controller and binding API",
			CACerts:     true, Tmp: true},
		{Repository: registry + "/tether-sidecar", Package: "./cmd/sidecar", Entrypoint: "/tether-sidecar",
			Description: "Tether sidecar, injected into trainer pods by the control plane",
			CACerts:     true},
		{Repository: registry + "/tether-trainer-standin", Package: "./test/framework/localcluster/trainer-standin", Entrypoint: "/trainer-standin",
			Description: "Tether test image: a stand-in trainer for the end-to-end suite", Test: true},
		{Repository: registry + "/tether-pause", Package: "./test/framework/localcluster/pause", Entrypoint: "/pause",
			Description: "Tether test image: the pod sandbox (pause) program of the local cluster's real node", Test: true},
	}
}

// File is one entry of an image's layer.
type File struct {
	Path string      // absolute path in the image, e.g. /tether-sidecar
	Mode fs.FileMode // permission bits plus fs.ModeDir or fs.ModeSticky
	Data []byte      // content of a regular file
}

// Files is the layer content of spec with the given binary (its bytes):
// parent directories included, sorted by path.
func Files(spec Spec, binary []byte) ([]File, error) {
	if !path.IsAbs(spec.Entrypoint) || path.Clean(spec.Entrypoint) != spec.Entrypoint {
		return nil, fmt.Errorf("image %s: entrypoint %q is not a clean absolute path", spec.Repository, spec.Entrypoint)
	}
	files := []File{{Path: spec.Entrypoint, Mode: 0o755, Data: binary}}
	if spec.CACerts {
		pemRoots, err := CARoots()
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: CACertsPath, Mode: 0o644, Data: pemRoots})
	}
	if spec.Tmp {
		files = append(files, File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777})
	}
	return withParents(files), nil
}

// withParents adds the missing parent directories (0755) and sorts.
func withParents(files []File) []File {
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if !have[d] {
				have[d] = true
				files = append(files, File{Path: d, Mode: fs.ModeDir | 0o755})
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}

// CARoots is the PEM bundle of Spec.CACerts.
func CARoots() ([]byte, error) {
	var b bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue // e.g. distrust-after: a PEM bundle would trust it without limit
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	if b.Len() == 0 {
		return nil, errors.New("no CA roots in golang.org/x/crypto/x509roots/fallback/bundle")
	}
	return b.Bytes(), nil
}

// LayerTar is the uncompressed layer of files: entries in the given order,
// relative names ("tether-sidecar", "etc/ssl/"), uid and gid 0 without
// names, every mtime mtime (whole seconds), no access or change times.
func LayerTar(files []File, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		h := &tar.Header{Name: name, Mode: int64(f.Mode.Perm()), ModTime: mtime, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.Mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Layer is files as an OCI gzip layer (gzip header without name or time).
func Layer(files []File, mtime time.Time) (v1.Layer, error) {
	raw, err := LayerTar(files, mtime)
	if err != nil {
		return nil, err
	}
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := z.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Image builds spec's image for one platform from the static binary at
// binaryPath. Nothing of the host file (owner, mode, mtime) reaches the
// image: only its bytes.
func Image(spec Spec, meta Meta, platform v1.Platform, binaryPath string) (v1.Image, error) {
	bin, err := os.ReadFile(binaryPath)
	if err != nil {
		return nil, err
	}
	files, err := Files(spec, bin)
	if err != nil {
		return nil, err
	}
	layer, err := Layer(files, meta.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: meta.Created.UTC().Truncate(time.Second)}
	cfg := &v1.ConfigFile{
		Created:      created,
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Config: v1.Config{
			User:       User,
			Entrypoint: []string{spec.Entrypoint},
			WorkingDir: "/",
			Labels:     Labels(spec, meta),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: "make images: go build -trimpath " + spec.Package,
			Comment:   spec.Entrypoint + ", static (CGO_ENABLED=0)",
		},
	})
}

// Labels are the image's OCI labels.
func Labels(spec Spec, meta Meta) map[string]string {
	l := map[string]string{
		LabelSource:   Source,
		LabelRevision: meta.Revision,
		LabelVersion:  meta.Version,
		LabelTitle:    spec.Title(),
	}
	if spec.Description != "" {
		l[LabelDescription] = spec.Description
	}
	return l
}

// Index is a multi-platform OCI image index of imgs (one per platform, in
// the given order).
func Index(imgs []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := cfg.Platform()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// Written is one image as Write left it.
type Written struct {
	Name   string `json:"name"`   // repository, e.g. ghcr.io/tether-dev/tether-sidecar
	Ref    string `json:"ref"`    // name:tag
	Digest string `json:"digest"` // of the manifest (one platform) or the index
	// Path is the OCI layout tar archive, Layout the OCI layout directory:
	// relative to the directory of the list (images.json) in a List, as
	// Write was given them otherwise.
	Path       string   `json:"path"`
	Layout     string   `json:"layout"`
	Size       int64    `json:"size"` // bytes of all blobs: manifest(s), config(s), gzipped layer(s)
	Platforms  []string `json:"platforms"`
	Entrypoint string   `json:"entrypoint"`
	Test       bool     `json:"test,omitempty"`
}

// Write stores img (a v1.Image or a v1.ImageIndex) under dir as the OCI
// layout directory dir/<title> and its tar archive dir/<title>.tar, both
// replaced if present. The layout's index.json has one entry, img, named ref
// by both org.opencontainers.image.ref.name and io.containerd.image.name. The
// tar has the layout's files in lexical order, directories 0755 and files
// 0644, owned by 0:0, every mtime mtime.
func Write(dir string, spec Spec, ref string, img any, mtime time.Time) (Written, error) {
	w := Written{Name: spec.Repository, Ref: ref, Entrypoint: spec.Entrypoint, Test: spec.Test,
		Layout: filepath.Join(dir, spec.Title()), Path: filepath.Join(dir, spec.Title()+".tar")}
	if err := os.RemoveAll(w.Layout); err != nil {
		return w, err
	}
	lp, err := layout.Write(w.Layout, empty.Index)
	if err != nil {
		return w, err
	}
	opts := []layout.Option{layout.WithAnnotations(map[string]string{AnnotationRefName: ref, AnnotationContainerName: ref})}
	var h v1.Hash
	switch x := img.(type) {
	case v1.Image:
		cfg, err := x.ConfigFile()
		if err != nil {
			return w, err
		}
		if p := cfg.Platform(); p != nil {
			opts = append(opts, layout.WithPlatform(*p))
			w.Platforms = []string{p.String()}
		}
		if err := lp.AppendImage(x, opts...); err != nil {
			return w, err
		}
		if h, err = x.Digest(); err != nil {
			return w, err
		}
	case v1.ImageIndex:
		if err := lp.AppendIndex(x, opts...); err != nil {
			return w, err
		}
		m, err := x.IndexManifest()
		if err != nil {
			return w, err
		}
		for _, d := range m.Manifests {
			if d.Platform != nil {
				w.Platforms = append(w.Platforms, d.Platform.String())
			}
		}
		if h, err = x.Digest(); err != nil {
			return w, err
		}
	default:
		return w, fmt.Errorf("write %s: %T is neither a v1.Image nor a v1.ImageIndex", ref, img)
	}
	w.Digest = h.String()
	if w.Size, err = blobBytes(w.Layout); err != nil {
		return w, err
	}
	return w, tarDir(w.Layout, w.Path, mtime)
}

func blobBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		n += info.Size()
		return err
	})
	return n, err
}

// tarDir writes the files under dir (an OCI layout) to the tar file out, in
// lexical order, with fixed owners, modes and times.
func tarDir(dir, out string, mtime time.Time) (err error) {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, out)
		} else {
			_ = os.Remove(tmp) // the write's error is the one to return
		}
	}()
	tw := tar.NewWriter(f)
	mtime = mtime.UTC().Truncate(time.Second)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			return tw.WriteHeader(h)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		info, err := src.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// List is the machine-readable record of one `make images`
// (bin/images/images.json), read by the end-to-end harness.
type List struct {
	Version  string    `json:"version"`
	Revision string    `json:"revision"`
	Created  time.Time `json:"created"`
	Images   []Written `json:"images"`
}

// WriteList writes list to file with each image's Path and Layout relative
// to file's directory.
func WriteList(file string, list List) error {
	base := filepath.Dir(file)
	out := list
	out.Images = make([]Written, len(list.Images))
	for i, w := range list.Images {
		for _, p := range []*string{&w.Path, &w.Layout} {
			if rel, err := filepath.Rel(base, *p); err == nil {
				*p = filepath.ToSlash(rel)
			}
		}
		out.Images[i] = w
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// ReadList reads a list written by WriteList, with each image's Path and
// Layout made absolute.
func ReadList(file string) (List, error) {
	var list List
	b, err := os.ReadFile(file)
	if err != nil {
		return list, err
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return list, fmt.Errorf("%s: %w", file, err)
	}
	base, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return list, err
	}
	for i := range list.Images {
		for _, p := range []*string{&list.Images[i].Path, &list.Images[i].Layout} {
			if !filepath.IsAbs(*p) {
				*p = filepath.Join(base, filepath.FromSlash(*p))
			}
		}
	}
	return list, nil
}
