// Package container runs a scenario's workers as Docker containers, for teams whose
// job ships as an image: Freeze is docker pause (the cgroup freezer), Kill is
// docker kill with SIGKILL, and CutOff and Slow act on the kit's etcd proxy as
// for processes. Each worker is a container of an image holding a static copy of
// the test binary (built once with the go command, CGO_ENABLED=0, FROM scratch,
// never pulled), on the host's network so it reaches the test's etcd and
// databases on loopback. It is a module of its own so Docker stays out of
// everyone else's go.sum.
//
//	scenario.Run(t, scenario.Config{..., Launcher: container.New(t, container.WithTags("e2e"))}, steps...)
package container

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/fencegate/fencegate/scenario"
)

var (
	// ErrDocker is what New fails the test with when the Docker engine cannot be
	// had or the worker image cannot be built.
	ErrDocker = errors.New("container: docker")
)

// repository is the worker image's name; its tag is the test binary's hash.
const repository = "fencegate-scenario-worker"

// Option configures New.
type Option func(*options) error

type options struct{ tags string }

// WithTags gives the build tags the test binary is built with (those of the go test
// run, such as "e2e"), so the worker binary holds the calling test.
func WithTags(tags string) Option {
	return func(o *options) error {
		if strings.ContainsAny(tags, " \t\n") {
			return fmt.Errorf("container: WithTags(%q): separate tags with commas", tags)
		}
		o.tags = tags
		return nil
	}
}

// Launcher starts workers as containers. It is a scenario.Launcher.
type Launcher struct {
	pool  *dockertest.Pool
	image string
}

// New builds (or finds) the worker image of the test binary in the current
// directory's package and returns a Launcher; in a worker it does nothing. It skips the test when the Docker
// engine is unreachable, unless the CI environment variable is set (then it fails),
// and fails it on a bad option or a failed build.
func New(t *testing.T, opts ...Option) *Launcher {
	t.Helper()
	var o options
	for _, opt := range opts {
		if opt == nil {
			t.Fatal("container: New: nil option")
		}
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if scenario.IsWorker() {
		return &Launcher{}
	}
	pool, err := dockertest.NewPool("")
	if err == nil {
		err = pool.Client.Ping()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: engine unreachable: %v", ErrDocker, err)
		}
		t.Skipf("%v: engine unreachable, skipping (set CI to make this a failure): %v", ErrDocker, err)
	}
	image, err := buildImage(t, pool, o.tags)
	if err != nil {
		t.Fatalf("%v: %v", ErrDocker, err)
	}
	return &Launcher{pool: pool, image: image}
}

// buildImage compiles a static test binary and builds the image FROM scratch
// holding it, unless an image of that binary exists.
func buildImage(t *testing.T, pool *dockertest.Pool, tags string) (string, error) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, "-tags", tags, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build a static test binary: %w\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	ref := repository + ":" + hex.EncodeToString(sum[:6])
	if _, err := pool.Client.InspectImage(ref); err == nil {
		return ref, nil
	}
	dockerfile := "FROM scratch\nCOPY worker.test /worker.test\nENTRYPOINT [\"/worker.test\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return "", err
	}
	var log strings.Builder
	err = pool.Client.BuildImage(dc.BuildImageOptions{Name: ref, Dockerfile: "Dockerfile", ContextDir: dir, OutputStream: &log, RmTmpContainer: true})
	if err != nil {
		return "", fmt.Errorf("docker build %s: %w\n%s", ref, err, log.String())
	}
	pruneOld(pool, ref)
	return ref, nil
}

// pruneOld removes the worker images of earlier test binaries (one in use stays).
func pruneOld(pool *dockertest.Pool, ref string) {
	imgs, err := pool.Client.ListImages(dc.ListImagesOptions{Filters: map[string][]string{"reference": {repository}}})
	if err != nil {
		return
	}
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if tag != ref && strings.HasPrefix(tag, repository+":") {
				pool.Client.RemoveImage(tag)
			}
		}
	}
}

// Host is loopback: the workers share the host's network.
func (l *Launcher) Host() string { return "127.0.0.1" }

// Launch runs the worker's container. It returns the engine's error.
func (l *Launcher) Launch(t *testing.T, worker string, args, env []string, out io.Writer) (scenario.Handle, error) {
	repo, tag, _ := strings.Cut(l.image, ":")
	res, err := l.pool.RunWithOptions(&dockertest.RunOptions{
		Name: fmt.Sprintf("scenario-%s-%d", worker, time.Now().UnixNano()), Repository: repo, Tag: tag, Cmd: args, Env: env,
	}, func(hc *dc.HostConfig) { hc.NetworkMode = "host" })
	if err != nil {
		return nil, fmt.Errorf("%w: run worker %s: %w", ErrDocker, worker, err)
	}
	t.Cleanup(func() { l.pool.Purge(res) })
	c := &container{pool: l.pool, id: res.Container.ID}
	go l.pool.Client.Logs(dc.LogsOptions{Container: c.id, OutputStream: out, ErrorStream: out, Follow: true, Stdout: true, Stderr: true})
	return c, nil
}

type container struct {
	pool *dockertest.Pool
	id   string
}

func (c *container) Freeze() error { return c.pool.Client.PauseContainer(c.id) }
func (c *container) Thaw() error   { return c.pool.Client.UnpauseContainer(c.id) }

func (c *container) Kill() error {
	return c.pool.Client.KillContainer(dc.KillContainerOptions{ID: c.id, Signal: dc.SIGKILL})
}

func (c *container) Wait() error {
	code, err := c.pool.Client.WaitContainer(c.id)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	return err
}

func (c *container) String() string { return "container " + c.id[:12] }
