package images_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/tether-dev/tether/internal/images"
)

// Build the pause test image from a (here: fake) static binary, write it as
// an OCI layout and archive, and build it again: same inputs, same digest.
func Example() {
	dir, err := os.MkdirTemp("", "images-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		panic(err)
	}

	var pause images.Spec
	for _, s := range images.Specs("ghcr.io/tether-dev") {
		if s.Title() == "tether-pause" {
			pause = s
		}
	}
	meta := images.Meta{Version: "v0.1.0", Revision: "0000000000000000000000000000000000000000", Created: time.Unix(1764580000, 0)}
	linux := v1.Platform{OS: "linux", Architecture: "amd64"}

	img, err := images.Image(pause, meta, linux, bin)
	if err != nil {
		panic(err)
	}
	w, err := images.Write(filepath.Join(dir, "out"), pause, pause.Ref(meta), img, meta.Created)
	if err != nil {
		panic(err)
	}
	cfg, _ := img.ConfigFile()
	fmt.Println("ref:", w.Ref)
	fmt.Println("archive:", filepath.Base(w.Path), "layout:", filepath.Base(w.Layout))
	fmt.Println("user:", cfg.Config.User, "entrypoint:", cfg.Config.Entrypoint)
	fmt.Println("revision label:", cfg.Config.Labels[images.LabelRevision])

	os.Chtimes(bin, time.Now(), time.Now()) // the host's mtime plays no part
	again, _ := images.Image(pause, meta, linux, bin)
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	fmt.Println("same digest:", d1 == d2, d1.String() == w.Digest)
	// Output:
	// ref: ghcr.io/tether-dev/tether-pause:v0.1.0
	// archive: tether-pause.tar layout: tether-pause
	// user: 65532:65532 entrypoint: [/pause]
	// revision label: 0000000000000000000000000000000000000000
	// same digest: true true
}
