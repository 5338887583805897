package testserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
)

// Program is a server the test harnesses build from a pinned module of its own (a
// go.mod and go.sum the harness embeds), so that the server's code never enters the
// go.sum of a module that imports the harness: etcd for locktest, versitygw for
// s3test.
type Program struct {
	Name      string // the binary's name, as in "etcd"
	Version   string // the release Mod pins, for the cache directory and messages
	Pkg       string // the main package to build, as in "go.etcd.io/etcd/server/v3"
	Mod, Sum  []byte // the building module's go.mod and go.sum
	EnvBinary string // the environment variable that may name a prebuilt binary
}

// Binary returns the path of p's binary: the one p.EnvBinary names, or one built
// with the go command on PATH from the Go module proxy, cached under the user's
// cache directory (keyed by Mod, Sum, the Go version and the platform), so that
// only the first run on a machine builds it. Processes that need it at once wait
// for one build (a file lock). Errors are not prefixed with the harness's name.
func (p Program) Binary(ctx context.Context) (string, error) {
	if path := os.Getenv(p.EnvBinary); path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%s: %w", p.EnvBinary, err)
		}
		return path, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set %s): %w", p.EnvBinary, err)
	}
	sum := sha256.New()
	for _, b := range [][]byte{p.Mod, p.Sum, []byte(runtime.Version()), []byte(runtime.GOOS + runtime.GOARCH)} {
		sum.Write(b)
		sum.Write([]byte{0})
	}
	dir := filepath.Join(cache, "fencegate", p.Name+"-"+p.Version+"-"+hex.EncodeToString(sum.Sum(nil))[:16])
	bin := filepath.Join(dir, p.Name)
	if built(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// One build at a time across processes (the test binaries of several packages
	// start together): the others wait for it and use its binary.
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if built(bin) {
		return bin, nil
	}
	if err := p.build(ctx, dir, bin); err != nil {
		return "", err
	}
	return bin, nil
}

func built(bin string) bool {
	fi, err := os.Stat(bin)
	return err == nil && fi.Mode().IsRegular()
}

// build compiles p into bin from a scratch module in dir; the rename makes a
// half-written binary impossible to find.
func (p Program) build(ctx context.Context, dir, bin string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command (or set %s): %w", p.Name, p.EnvBinary, err)
	}
	mod, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mod)
	for name, b := range map[string][]byte{"go.mod": p.Mod, "go.sum": p.Sum} {
		if err := os.WriteFile(filepath.Join(mod, name), b, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(mod, p.Name)
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-o", tmp, p.Pkg)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s %s: %w\n%s", p.Name, p.Version, err, Tail(string(out)))
	}
	return os.Rename(tmp, bin)
}
