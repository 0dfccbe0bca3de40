package artifacts

import (
	"fmt"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/upload"
)

// TooLargeError is a file over MaxObjectSize: S3 cannot store it.
type TooLargeError struct {
	Path string
	Size int64
}

func (e TooLargeError) Error() string {
	return fmt.Sprintf("its size %d bytes (%s) is over S3's object limit of %s (upload.MaxObjectSize)", e.Size, humanBytes(e.Size), humanBytes(upload.MaxObjectSize))
}

func (e TooLargeError) hint() string {
	return fmt.Sprintf("it is never uploaded and the job's artifacts are incomplete: split it, or exclude it with the %s annotation (e.g. %s: %q)",
		names.ExcludeAnnotation, names.ExcludeAnnotation, e.Path)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<40 && n%(1<<40) == 0:
		return fmt.Sprintf("%d TiB", n>>40)
	case n >= 1<<40:
		return fmt.Sprintf("%.2f TiB", float64(n)/(1<<40))
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
