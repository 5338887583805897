//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// Images names the three images a topology runs, each tagged with a hash of its
// inputs so that a changed input builds a new image and an unchanged one is reused.
type Images struct {
	Etcd     string // repository:tag of etcd + etcdctl, FROM scratch
	Postgres string // repository:tag of PostgreSQL 15 on a trimmed Debian rootfs
	MariaDB  string // repository:tag of MariaDB 10.11 on a trimmed Debian rootfs
	Worker   string // repository:tag of examples/billing, FROM scratch
}

const (
	etcdRepo   = "fencegate-e2e-etcd"
	workerRepo = "fencegate-e2e-billing"

	// pgData is the data directory initialised inside the PostgreSQL image.
	pgData = "/var/lib/postgresql/data"
	pgBin  = "/usr/lib/postgresql/15/bin"
	// mariadbInit runs at every MariaDB start: the worker's database and TCP user.
	mariadbInit = "/etc/mysql/e2e-init.sql"
)

// etcdDockerfile needs no registry: FROM scratch and two static binaries. No
// "# syntax=" line, which would make BuildKit pull a frontend.
const etcdDockerfile = `FROM scratch
COPY etcd etcdctl /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/etcd"]
`

const workerDockerfile = `FROM scratch
COPY billing /billing
ENTRYPOINT ["/billing"]
`

// postgresImage is PostgreSQL 15 with a trust-authenticated data directory.
var postgresImage = rootfs{
	name:    "fencegate-e2e-postgres",
	include: "postgresql-15",
	// LLVM serves the JIT only (jit=off below); the packaged cluster is replaced.
	remove: append(slices.Clip(trimmed), "usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", "usr/lib/x86_64-linux-gnu/libz3.so.4",
		"usr/lib/postgresql/15/lib/bitcode", "var/lib/postgresql/15", "etc/postgresql/15"),
	steps: [][]string{
		{"mkdir", "-p", "-m", "700", pgData},
		{"chown", "postgres:postgres", pgData},
		{"/usr/sbin/runuser", "-u", "postgres", "--", pgBin + "/initdb", "-D", pgData, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"},
	},
	appends: map[string]string{
		pgData + "/pg_hba.conf": "host all all 0.0.0.0/0 trust\n",
		// Durability settings are on the server's command line (database.go), so
		// they are visible next to what the suite claims and change no image.
		pgData + "/postgresql.conf": "listen_addresses = '*'\njit = off\nmax_connections = 200\n",
	},
}

// mariadbImage is MariaDB 10.11 with its system tables in /var/lib/mysql and an
// init file that creates the billing database and a password-less TCP user.
var mariadbImage = rootfs{
	name:    "fencegate-e2e-mariadb",
	include: "mariadb-server",
	remove:  append(slices.Clip(trimmed), "var/lib/mysql"),
	steps: [][]string{
		{"mkdir", "-p", "/var/lib/mysql", "/run/mysqld"},
		{"chown", "mysql:mysql", "/var/lib/mysql", "/run/mysqld"},
		{"mariadb-install-db", "--no-defaults", "--force", "--user=mysql", "--datadir=/var/lib/mysql",
			"--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve"},
	},
	appends: map[string]string{
		mariadbInit: "CREATE DATABASE IF NOT EXISTS billing;\nCREATE USER IF NOT EXISTS 'billing'@'%';\nGRANT ALL ON *.* TO 'billing'@'%';\n",
	},
}

// BuildImages builds (or finds, by tag) the images the suite runs. repoRoot is the
// module root; progress goes to out. Only the inputs that changed are rebuilt: the
// worker binary is rebuilt every run (seconds, from Go's build cache) and its image
// is tagged with the binary's hash.
func BuildImages(pool *dockertest.Pool, repoRoot string, out io.Writer) (Images, error) {
	cache, err := cacheDir()
	if err != nil {
		return Images{}, err
	}
	var im Images
	steps := []struct {
		name string
		fn   func() (string, error)
		dst  *string
	}{
		{"etcd", func() (string, error) { return buildEtcd(pool, repoRoot, cache, out) }, &im.Etcd},
		{"postgres", func() (string, error) { return buildRootfsImage(pool, cache, postgresImage, out) }, &im.Postgres},
		{"mariadb", func() (string, error) { return buildRootfsImage(pool, cache, mariadbImage, out) }, &im.MariaDB},
		{"worker", func() (string, error) { return buildWorker(pool, repoRoot, cache, out) }, &im.Worker},
	}
	for _, s := range steps {
		start := time.Now()
		ref, err := s.fn()
		if err != nil {
			return Images{}, fmt.Errorf("e2e: %s image: %w", s.name, err)
		}
		fmt.Fprintf(out, "e2e: image %-8s %s (%.1fs)\n", s.name, ref, time.Since(start).Seconds())
		*s.dst = ref
		pruneOld(pool, ref, out)
	}
	return im, nil
}

// cacheDir is where build outputs that outlive a checkout are kept (the PostgreSQL
// rootfs tarball above all), so a fresh clone on the same machine starts in seconds.
func cacheDir() (string, error) {
	dir := os.Getenv("FENCEGATE_E2E_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("e2e: no cache directory (set FENCEGATE_E2E_CACHE): %w", err)
		}
		dir = filepath.Join(base, "fencegate-e2e")
	}
	return dir, os.MkdirAll(dir, 0o755)
}

func hashOf(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// pruneOld removes the other tags of ref's repository: images of inputs that have
// changed since. One still used by a container stays.
func pruneOld(pool *dockertest.Pool, ref string, out io.Writer) {
	repo, _, _ := strings.Cut(ref, ":")
	imgs, err := pool.Client.ListImages(dc.ListImagesOptions{Filters: map[string][]string{"reference": {repo}}})
	if err != nil {
		return
	}
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if tag != ref && strings.HasPrefix(tag, repo+":") {
				if pool.Client.RemoveImage(tag) == nil {
					fmt.Fprintf(out, "e2e: removed outdated image %s\n", tag)
				}
			}
		}
	}
}

func imageExists(pool *dockertest.Pool, ref string) bool {
	_, err := pool.Client.InspectImage(ref)
	return err == nil
}

func buildEtcd(pool *dockertest.Pool, repoRoot, cache string, out io.Writer) (string, error) {
	mod := filepath.Join(repoRoot, "e2e", "images", "etcd")
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		return "", err
	}
	gosum, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil {
		return "", err
	}
	tag := hashOf(gomod, gosum, []byte(etcdDockerfile), []byte(runtime.Version()))
	ref := etcdRepo + ":" + tag
	if imageExists(pool, ref) {
		return ref, nil
	}
	dir := filepath.Join(cache, "etcd-"+tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "e2e: building etcd and etcdctl v3.7.3 from the module proxy (about a minute cold)\n")
	for _, b := range []struct{ pkg, bin string }{
		{"go.etcd.io/etcd/server/v3", "etcd"},
		{"go.etcd.io/etcd/etcdctl/v3", "etcdctl"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, b.bin), b.pkg)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
		if err := run(cmd, out); err != nil {
			return "", fmt.Errorf("go build %s: %w", b.pkg, err)
		}
	}
	return ref, buildImage(pool, ref, etcdDockerfile, dir, out)
}

func buildWorker(pool *dockertest.Pool, repoRoot, cache string, out io.Writer) (string, error) {
	dir := filepath.Join(cache, "worker")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "billing")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./examples/billing")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if err := run(cmd, out); err != nil {
		return "", fmt.Errorf("go build ./examples/billing: %w", err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	ref := workerRepo + ":" + hashOf(b, []byte(workerDockerfile))
	if imageExists(pool, ref) {
		return ref, nil
	}
	return ref, buildImage(pool, ref, workerDockerfile, dir, out)
}

// buildImage builds dockerfile with the files in dir as context, tagged ref.
func buildImage(pool *dockertest.Pool, ref, dockerfile, dir string, out io.Writer) error {
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "e2e: docker build %s\n", ref)
	var log bytes.Buffer
	err := pool.Client.BuildImage(dc.BuildImageOptions{
		Name:           ref,
		Dockerfile:     "Dockerfile",
		ContextDir:     dir,
		OutputStream:   &log,
		RmTmpContainer: true,
	})
	if err != nil {
		return fmt.Errorf("docker build %s: %w\n%s", ref, err, log.String())
	}
	return nil
}

// buildRootfsImage imports r's rootfs tarball as an image, making the tarball first
// unless the cache holds it.
func buildRootfsImage(pool *dockertest.Pool, cache string, r rootfs, out io.Writer) (string, error) {
	tag := r.tag()
	ref := r.name + ":" + tag
	if imageExists(pool, ref) {
		return ref, nil
	}
	tarball := filepath.Join(cache, r.name+"-rootfs-"+tag+".tar")
	if _, err := os.Stat(tarball); err != nil {
		if err := r.make(cache, tarball, out); err != nil {
			return "", err
		}
	}
	// Tarballs of earlier recipes are not used again.
	old, _ := filepath.Glob(filepath.Join(cache, r.name+"-rootfs-*.tar"))
	for _, f := range old {
		if f != tarball {
			_ = os.Remove(f)
		}
	}
	fmt.Fprintf(out, "e2e: docker import %s as %s\n", tarball, ref)
	f, err := os.Open(tarball)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var log bytes.Buffer
	if err := pool.Client.ImportImage(dc.ImportImageOptions{
		Repository:   r.name,
		Tag:          tag,
		Source:       "-",
		InputStream:  f,
		OutputStream: &log,
	}); err != nil {
		return "", fmt.Errorf("docker import: %w\n%s", err, log.String())
	}
	return ref, nil
}

// run runs cmd, copying its output to out and keeping the tail for the error.
func run(cmd *exec.Cmd, out io.Writer) error {
	var tail bytes.Buffer
	w := io.MultiWriter(out, &tail)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		s := tail.String()
		if len(s) > 2000 {
			s = s[len(s)-2000:]
		}
		return fmt.Errorf("%w\n%s", err, s)
	}
	return nil
}
