// Command images is `make images`: it builds Tether's static binaries and
// their OCI images (internal/images) without a container engine, writes each
// as an OCI layout directory and an OCI layout tar under -out, prints each
// image's reference, digest and size, and records them in -out/images.json.
//
// The tag and org.opencontainers.image.version are -version (the Makefile's
// VERSION, by default internal/version.Version); the revision label and
// internal/version.Revision are the git commit; the created time and every
// file's mtime are SOURCE_DATE_EPOCH or else the commit's time, so one
// commit gives one digest per image.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/tether-dev/tether/internal/images"
	"github.com/tether-dev/tether/internal/version"
)

const versionPkg = "github.com/tether-dev/tether/internal/version"

func main() {
	out := flag.String("out", "bin/images", "output directory")
	ver := flag.String("version", version.Version, "version: the images' tag and the binaries' internal/version.Version")
	platforms := flag.String("platforms", "linux/"+runtime.GOARCH, "comma-separated platforms, e.g. linux/amd64,linux/arm64 (more than one: each image is an OCI index)")
	only := flag.String("only", "", "comma-separated image titles to build (default all), e.g. tether-sidecar,tether-pause")
	flag.Parse()
	if err := run(*out, *ver, *platforms, *only); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(out, ver, platformList, only string) error {
	start := time.Now()
	meta, err := gitMeta(ver)
	if err != nil {
		return err
	}
	specs := images.Specs(version.Registry)
	if only != "" {
		want := map[string]bool{}
		for _, t := range strings.Split(only, ",") {
			want[strings.TrimSpace(t)] = true
		}
		var sel []images.Spec
		for _, s := range specs {
			if want[s.Title()] {
				sel = append(sel, s)
				delete(want, s.Title())
			}
		}
		for t := range want {
			return fmt.Errorf("-only: no image %q", t)
		}
		specs = sel
	}
	var plats []v1.Platform
	for _, p := range strings.Split(platformList, ",") {
		pl, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		if pl.OS != "linux" {
			return fmt.Errorf("platform %s: only linux images are built", pl)
		}
		plats = append(plats, *pl)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	// One go build per platform for all binaries.
	binDir := map[string]string{}
	for _, p := range plats {
		dir := filepath.Join(out, ".bin", p.OS+"_"+p.Architecture+p.Variant)
		if err := goBuild(dir, p, meta, specs); err != nil {
			return err
		}
		binDir[p.String()] = dir
	}
	built := time.Now()

	list := images.List{Version: meta.Version, Revision: meta.Revision, Created: meta.Created.UTC()}
	for _, s := range specs {
		var imgs []v1.Image
		for _, p := range plats {
			img, err := images.Image(s, meta, p, filepath.Join(binDir[p.String()], filepath.Base(s.Package)))
			if err != nil {
				return fmt.Errorf("%s (%s): %w", s.Repository, p, err)
			}
			imgs = append(imgs, img)
		}
		var art any = imgs[0]
		if len(imgs) > 1 {
			idx, err := images.Index(imgs)
			if err != nil {
				return err
			}
			art = idx
		}
		w, err := images.Write(out, s, s.Ref(meta), art, meta.Created)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Repository, err)
		}
		list.Images = append(list.Images, w)
	}
	listFile := filepath.Join(out, "images.json")
	if err := images.WriteList(listFile, list); err != nil {
		return err
	}

	fmt.Printf("images %s (revision %s, created %s):\n", meta.Version, meta.Revision, meta.Created.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tSIZE\tPLATFORMS\tARCHIVE")
	for _, w := range list.Images {
		test := ""
		if w.Test {
			test = " (test image)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\n", w.Ref, w.Digest, human(w.Size), strings.Join(w.Platforms, ","), w.Path, test)
	}
	tw.Flush()
	fmt.Printf("list: %s; go build %s, images %s\n", listFile, built.Sub(start).Round(100*time.Millisecond), time.Since(built).Round(100*time.Millisecond))
	return nil
}

// gitMeta is the version, the commit and its time (or SOURCE_DATE_EPOCH).
func gitMeta(ver string) (images.Meta, error) {
	m := images.Meta{Version: ver}
	if ver == "" {
		return m, fmt.Errorf("-version is empty")
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return m, err
	}
	m.Revision = rev
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct", "HEAD"); err != nil {
			return m, err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, fmt.Errorf("SOURCE_DATE_EPOCH / commit time %q: %w", epoch, err)
	}
	m.Created = time.Unix(sec, 0).UTC()
	if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		fmt.Fprintf(os.Stderr, "images: warning: the work tree has uncommitted changes; the images are built from it, labelled with commit %.12s, and are not that commit's images\n", rev)
	}
	return m, nil
}

func git(args ...string) (string, error) {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// goBuild builds the specs' binaries for p into dir: static, trimmed,
// stripped, with the version and revision set.
func goBuild(dir string, p v1.Platform, meta images.Meta, specs []images.Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Revision=%s", versionPkg, meta.Version, versionPkg, meta.Revision)
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", dir + string(filepath.Separator)}
	for _, s := range specs {
		args = append(args, s.Package)
	}
	gobin := os.Getenv("GO")
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.Command(gobin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm" && strings.HasPrefix(p.Variant, "v") {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", p, err)
	}
	return nil
}

func human(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
