//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// makePostgresRootfs debootstraps Debian bookworm with PostgreSQL 15 from the mirror
// apt already uses, trims it, initialises the data directory inside it and writes it
// as a tarball (written under a temporary name, renamed when complete).
func makePostgresRootfs(cache, tarball string, out io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("debootstrap and chroot need root; run the e2e suite as root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("debootstrap is not installed (scripts/e2e installs it: apt-get install debootstrap)")
	}
	root, err := os.MkdirTemp(cache, "rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o755); err != nil { // the postgres user must reach /
		return err
	}
	mirror := debianMirror()
	fmt.Fprintf(out, "e2e: debootstrap bookworm + postgresql-15 from %s (about a minute cold)\n", mirror)
	if err := run(exec.Command("debootstrap", "--variant=minbase", "--include=postgresql-15", "bookworm", root, mirror), &stages{w: out}); err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	for _, p := range strings.Fields(strings.TrimPrefix(postgresRecipe[1], "rm ")) {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	data := filepath.Join(root, pgData)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	steps := [][]string{
		{"chroot", root, "chown", "postgres:postgres", pgData},
		{"chroot", root, "/usr/sbin/runuser", "-u", "postgres", "--", pgBin + "/initdb", "-D", pgData, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"},
	}
	for _, s := range steps {
		if err := run(exec.Command(s[0], s[1:]...), io.Discard); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(s[2:], " "), err)
		}
	}
	if err := appendFile(filepath.Join(data, "pg_hba.conf"), "host all all 0.0.0.0/0 trust\n"); err != nil {
		return err
	}
	conf := "listen_addresses = '*'\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\njit = off\nmax_connections = 200\n"
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		return err
	}
	fmt.Fprintf(out, "e2e: writing %s\n", tarball)
	tmp := tarball + ".partial"
	if err := run(exec.Command("tar", "-C", root, "--numeric-owner", "-cf", tmp, "."), out); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	return os.Rename(tmp, tarball)
}

// debianMirror returns the Debian mirror apt is configured with (one-line or deb822
// sources), or deb.debian.org.
func debianMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		var uris []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			switch {
			case len(fields) >= 3 && fields[0] == "deb" && strings.HasPrefix(fields[1], "http"):
				if strings.HasPrefix(fields[2], "bookworm") {
					uris = append(uris, fields[1])
				}
			case len(fields) >= 2 && fields[0] == "URIs:":
				uris = append(uris, fields[1:]...)
			}
		}
		f.Close()
		for _, u := range uris {
			if strings.HasSuffix(strings.TrimSuffix(u, "/"), "/debian") {
				return u
			}
		}
	}
	return "http://deb.debian.org/debian"
}

func appendFile(name, s string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stages passes on the first line of each stage of debootstrap's output
// ("I: Retrieving ...", "I: Unpacking ...") and the lines that are not progress.
type stages struct {
	w    io.Writer
	seen map[string]bool
	part []byte
}

func (s *stages) Write(p []byte) (int, error) {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(s.part[:i])
		s.part = s.part[i+1:]
		verb, _, _ := strings.Cut(strings.TrimPrefix(line, "I: "), " ")
		if strings.HasPrefix(line, "I: ") && s.seen[verb] {
			continue
		}
		s.seen[verb] = true
		fmt.Fprintf(s.w, "e2e: debootstrap: %s\n", line)
	}
}
