package s3test

import (
	"context"
	"crypto/sha256"
	_ "embed" // the versitygw build module's go.mod and go.sum
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/fencegate/fencegate/internal/testserver"
)

// The module that builds versitygw: a go.mod requiring github.com/versity/versitygw
// at Version, and its go.sum, kept apart from s3fence's own go.mod so that the
// gateway's dependencies never reach s3fence's users. To move to another version:
// in an empty directory, `go mod init fencegate.s3test/versitygw && go get
// github.com/versity/versitygw/cmd/versitygw@VERSION`, then copy go.mod and go.sum
// here as versitygw.mod and versitygw.sum and change Version.
var (
	//go:embed versitygw.mod
	gwMod []byte
	//go:embed versitygw.sum
	gwSum []byte
)

// Version is the versitygw release the harness builds.
const Version = "v1.8.0"

// EnvBinary names the environment variable holding the path of a versitygw binary
// to run instead of building one.
const EnvBinary = "FENCEGATE_VERSITYGW"

// Binary returns the path of a versitygw binary: the one EnvBinary names, or one
// built from the Go module proxy with the go command on PATH, cached under the
// user's cache directory (keyed by the pinned go.mod, go.sum and Go version), so
// that only the first run on a machine builds it (about a minute with a warm Go
// build cache). Processes that need it at once wait for one build (a file lock).
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", EnvBinary, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("s3test: no cache directory: %w", err)
	}
	sum := sha256.New()
	for _, b := range [][]byte{gwMod, gwSum, []byte(runtime.Version()), []byte(runtime.GOOS + runtime.GOARCH)} {
		sum.Write(b)
		sum.Write([]byte{0})
	}
	dir := filepath.Join(cache, "fencegate", "versitygw-"+Version+"-"+hex.EncodeToString(sum.Sum(nil))[:16])
	bin := filepath.Join(dir, "versitygw")
	if built(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// One build at a time across processes (test binaries of several packages
	// start together): the others wait for it and use its binary.
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("s3test: lock %s: %w", lock.Name(), err)
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

// build compiles versitygw into bin from a scratch module in dir.
func build(ctx context.Context, dir, bin string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("s3test: building versitygw needs the go command: %w", err)
	}
	mod, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mod)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), gwMod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), gwSum, 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(mod, "versitygw")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-o", tmp, "github.com/versity/versitygw/cmd/versitygw")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("s3test: go build versitygw %s: %w\n%s", Version, err, testserver.Tail(strings.TrimSpace(string(out))))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("s3test: %w", err)
	}
	return nil
}
