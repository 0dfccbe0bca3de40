package pythonenv

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Packages makes Debian's Python packages available (hack/testbin.sh
// python, cached) and returns the PYTHONPATH its python3 wrapper sets.
// An error means they could not be obtained.
func Packages(root string) (string, error) {
	testbin := func(args ...string) ([]byte, error) {
		cmd := exec.Command("bash", append([]string{filepath.Join(root, "hack", "testbin.sh")}, args...)...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("hack/testbin.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out, nil
	}
	if _, err := testbin("python"); err != nil {
		return "", err
	}
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := testbin("--print-dir")
		if err != nil {
			return "", err
		}
		dir = strings.TrimSpace(string(out))
	}
	wrapper := filepath.Join(dir, "python3")
	out, err := exec.Command(wrapper, "-c", "import os; print(os.environ['PYTHONPATH'])").Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", wrapper, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Install builds a venv of /usr/bin/python3 under dir and installs a copy
// of root's clients/python into it offline, as its README says
// (--system-site-packages, --no-build-isolation), with pythonPath's
// packages. It returns the venv.
func Install(root, dir, pythonPath string) (string, error) {
	src := filepath.Join(dir, "src")
	if err := copySources(filepath.Join(root, "clients", "python"), src); err != nil {
		return "", err
	}
	venv := filepath.Join(dir, "venv")
	for _, args := range [][]string{
		{"/usr/bin/python3", "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", "--no-build-isolation", src},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return venv, nil
}

// copySources copies the package's sources (no tests, build or cache
// outputs), so pip's in-tree build writes nothing into the checkout.
func copySources(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			switch d.Name() {
			case "build", "__pycache__", ".mypy_cache", ".pytest_cache", "tests":
				return filepath.SkipDir
			}
			if strings.HasSuffix(d.Name(), ".egg-info") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
}
