//go:build !unix

package artifacts

import (
	"fmt"
	"io/fs"
)

func permissionDetail(fi fs.FileInfo) string { return fmt.Sprintf("mode %#o", fi.Mode().Perm()) }
