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
	"slices"
	"strings"
)

// rootfs is a recipe for a database image: a Debian bookworm rootfs with one server
// package from the mirror apt already uses, trimmed, with its data directory
// initialised inside. Every field is an input of the image: its hash is the image
// tag and the cached tarball's name.
type rootfs struct {
	name    string            // image repository and tarball prefix
	include string            // debootstrap --include
	remove  []string          // paths trimmed from the rootfs
	steps   [][]string        // commands run in the rootfs (chroot), in order
	appends map[string]string // text appended to files of the rootfs, after the steps
}

// Trimmed from every rootfs: documentation, locales, apt's caches.
var trimmed = []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/i18n", "usr/share/lintian", "var/cache/apt", "var/lib/apt/lists"}

func (r rootfs) tag() string {
	var b strings.Builder
	fmt.Fprintf(&b, "debootstrap --variant=minbase --include=%s bookworm\nrm %q\n", r.include, r.remove)
	for _, s := range r.steps {
		fmt.Fprintf(&b, "run %q\n", s)
	}
	keys := make([]string, 0, len(r.appends))
	for k := range r.appends {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "append %s %q\n", k, r.appends[k])
	}
	return hashOf([]byte(b.String()))
}

// make debootstraps the rootfs, trims it, runs the steps and writes it as a
// tarball (under a temporary name, renamed when complete).
func (r rootfs) make(cache, tarball string, out io.Writer) error {
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
	if err := os.Chmod(root, 0o755); err != nil { // the server's user must reach /
		return err
	}
	mirror := debianMirror()
	fmt.Fprintf(out, "e2e: debootstrap bookworm + %s from %s (about a minute cold)\n", r.include, mirror)
	if err := run(exec.Command("debootstrap", "--variant=minbase", "--include="+r.include, "bookworm", root, mirror), &stages{w: out}); err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	for _, p := range r.remove {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	for _, s := range r.steps {
		if err := run(exec.Command("chroot", append([]string{root}, s...)...), io.Discard); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(s, " "), err)
		}
	}
	for name, text := range r.appends {
		if err := appendFile(filepath.Join(root, name), text); err != nil {
			return err
		}
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
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
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
