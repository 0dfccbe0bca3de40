//go:build unix

package artifacts

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// permissionDetail says who owns a file the sidecar may not read, with its
// mode, and who the sidecar is: what a platform team needs to fix it.
func permissionDetail(fi fs.FileInfo) string {
	who := fmt.Sprintf("the sidecar runs as uid %d, gid %d", os.Getuid(), os.Getgid())
	if gids, err := os.Getgroups(); err == nil && len(gids) > 0 {
		who += fmt.Sprintf(", groups %v", gids)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("mode %#o, owner uid %d gid %d; %s", fi.Mode().Perm(), st.Uid, st.Gid, who)
	}
	return fmt.Sprintf("mode %#o; %s", fi.Mode().Perm(), who)
}
