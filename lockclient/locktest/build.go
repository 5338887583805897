package locktest

import (
	"context"
	"crypto/sha256"
	_ "embed" // the etcd build module's go.mod and go.sum
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// The module that builds the etcd server binary: a go.mod requiring
// go.etcd.io/etcd/server/v3 at Version, and its go.sum, kept apart from
// fencegate's go.mod so that etcd's server and its dependencies never reach the
// go.sum of a module that imports lockclient. They are the same files as
// e2e/images/etcd's; to move to another version, update those and copy them here
// as etcd.mod and etcd.sum, and change Version.
var (
	//go:embed etcd.mod
	etcdMod []byte
	//go:embed etcd.sum
	etcdSum []byte
)

// Version is the etcd release the harness builds and runs.
const Version = "v3.7.3"

// EnvBinary names the environment variable holding the path of an etcd binary
// to run instead of building one.
const EnvBinary = "FENCEGATE_ETCD"

// Binary returns the path of an etcd server binary: the one EnvBinary names, or
// one built with the go command on PATH from the Go module proxy, cached under the
// user's cache directory (keyed by the pinned go.mod, go.sum and Go version), so
// that only the first run on a machine builds it. Processes that need it at once
// wait for one build (a file lock).
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("locktest: %s: %w", EnvBinary, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locktest: no cache directory (set %s): %w", EnvBinary, err)
	}
	sum := sha256.New()
	for _, b := range [][]byte{etcdMod, etcdSum, []byte(runtime.Version()), []byte(runtime.GOOS + runtime.GOARCH)} {
		sum.Write(b)
		sum.Write([]byte{0})
	}
	dir := filepath.Join(cache, "fencegate", "etcd-"+Version+"-"+hex.EncodeToString(sum.Sum(nil))[:16])
	bin := filepath.Join(dir, "etcd")
	if built(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("locktest: %w", err)
	}
	// One build at a time across processes (the test binaries of several
	// packages start together): the others wait for it and use its binary.
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("locktest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locktest: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if built(bin) {
		return bin, nil
	}
	if err := build(ctx, dir, bin); err != nil {
		return "", err
	}
	return bin, nil
}

func built(bin string) bool {
	fi, err := os.Stat(bin)
	return err == nil && fi.Mode().IsRegular()
}

// build compiles etcd into bin from a scratch module in dir; the rename makes a
// half-written binary impossible to find.
func build(ctx context.Context, dir, bin string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("locktest: building etcd needs the go command (or set %s): %w", EnvBinary, err)
	}
	mod, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("locktest: %w", err)
	}
	defer os.RemoveAll(mod)
	for name, b := range map[string][]byte{"go.mod": etcdMod, "go.sum": etcdSum} {
		if err := os.WriteFile(filepath.Join(mod, name), b, 0o644); err != nil {
			return fmt.Errorf("locktest: %w", err)
		}
	}
	tmp := filepath.Join(mod, "etcd")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-o", tmp, "go.etcd.io/etcd/server/v3")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("locktest: go build etcd %s: %w\n%s", Version, err, tail(string(out)))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("locktest: %w", err)
	}
	return nil
}

// tail returns the last 15 lines of s, enough to show why a build or a member
// failed.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
