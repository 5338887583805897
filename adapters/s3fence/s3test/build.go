package s3test

import (
	"context"
	_ "embed" // the versitygw build module's go.mod and go.sum
	"fmt"

	"github.com/fencegate/fencegate/testserver"
)

// The module that builds versitygw: a go.mod requiring github.com/versity/versitygw
// at version, and its go.sum, kept apart from s3fence's own go.mod so that the
// gateway's dependencies never reach s3fence's users. To move to another version:
// in an empty directory, `go mod init fencegate.s3test/versitygw && go get
// github.com/versity/versitygw/cmd/versitygw@VERSION`, then copy go.mod and go.sum
// here as versitygw.mod and versitygw.sum, and change version and the package doc.
var (
	//go:embed versitygw.mod
	gwMod []byte
	//go:embed versitygw.sum
	gwSum []byte
)

const (
	// version is the versitygw release the harness builds.
	version = "v1.8.0"
	// envBinary names the environment variable holding the path of a versitygw
	// binary to run instead of building one.
	envBinary = "FENCEGATE_VERSITYGW"
)

// versitygw is the gateway, built from the pinned module above.
var versitygw = testserver.Program{
	Name: "versitygw", Version: version, Pkg: "github.com/versity/versitygw/cmd/versitygw",
	Mod: gwMod, Sum: gwSum, EnvBinary: envBinary,
}

// binary returns the path of a versitygw binary: the one envBinary names, or one
// built from the Go module proxy with the go command on PATH, cached under the
// user's cache directory (keyed by the pinned go.mod, go.sum and Go version), so
// that only the first run on a machine builds it (about a minute with a warm Go
// build cache). Processes that need it at once wait for one build (a file lock).
func binary(ctx context.Context) (string, error) {
	bin, err := versitygw.Binary(ctx)
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	return bin, nil
}
