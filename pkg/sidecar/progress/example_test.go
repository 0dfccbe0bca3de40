package progress_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/progress"
)

func ExampleReader() {
	dir, err := os.MkdirTemp("", "artifacts")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// The trainer appends one JSON object per line; the last line is still
	// being written.
	lines := "{\"step\":100,\"loss\":0.5}\n{\"step\":200,\"loss\":0.25,\"fraction\":0.4}\n{\"step\":30"
	if err := os.WriteFile(filepath.Join(dir, binding.ProgressFile), []byte(lines), 0o644); err != nil {
		panic(err)
	}
	p, err := progress.NewReader(dir).Read()
	if err != nil {
		panic(err)
	}
	fmt.Println(*p.Step, *p.Loss, *p.Fraction)
	// Output: 200 0.25 0.4
}
