package locktest

import (
	"context"
	_ "embed" // the etcd build module's go.mod and go.sum
	"fmt"

	"github.com/fencegate/fencegate/testserver"
)

// The module that builds the etcd server binary: a go.mod requiring
// go.etcd.io/etcd/server/v3 at version, and its go.sum, kept apart from
// fencegate's go.mod so that etcd's server and its dependencies never reach the
// go.sum of a module that imports lockclient. They are the same files as
// e2e/images/etcd's; to move to another version, update those and copy them here
// as etcd.mod and etcd.sum, and change version.
var (
	//go:embed etcd.mod
	etcdMod []byte
	//go:embed etcd.sum
	etcdSum []byte
)

// version is the etcd release the harness builds and runs (the package doc
// names it).
const version = "v3.7.3"

// envBinary names the environment variable holding the path of an etcd binary
// to run instead of building one (the package doc names it).
const envBinary = "FENCEGATE_ETCD"

// etcd is the etcd server, built from the pinned module above.
var etcd = testserver.Program{
	Name: "etcd", Version: version, Pkg: "go.etcd.io/etcd/server/v3",
	Mod: etcdMod, Sum: etcdSum, EnvBinary: envBinary,
}

// findBinary returns the path of an etcd server binary: the one envBinary names, or
// one built with the go command on PATH from the Go module proxy, cached under the
// user's cache directory (keyed by the pinned go.mod, go.sum and Go version), so
// that only the first run on a machine builds it. Processes that need it at once
// wait for one build (a file lock).
func findBinary(ctx context.Context) (string, error) {
	bin, err := etcd.Binary(ctx)
	if err != nil {
		return "", fmt.Errorf("locktest: %w", err)
	}
	return bin, nil
}

// tail returns the last 15 lines of s, enough to show why a member failed.
func tail(s string) string { return testserver.Tail(s) }
