// Package exampletest runs an example program the way a user runs it: built with
// go build (with the race detector when the tests run under it) into a temporary
// directory, once per test binary, and started as a separate process with flags.
//
//	var example = exampletest.New("flashsale")
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		example.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { out, code := example.Run(t, "-sqlite", path) ... }
package exampletest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

// Example is the main package in the test's working directory (its package
// directory). It is safe for concurrent use.
type Example struct {
	name string
	once sync.Once
	dir  string
	bin  string
	err  error
}

// New returns an Example named name (the binary's name, used in logs and errors),
// built on first use.
func New(name string) *Example { return &Example{name: name} }

// Binary builds the example on the first call and returns the binary's path. It
// fails t when the example does not build.
func (e *Example) Binary(t testing.TB) string {
	t.Helper()
	e.once.Do(func() {
		e.dir, e.err = os.MkdirTemp("", e.name+"-test-")
		if e.err != nil {
			return
		}
		e.bin = filepath.Join(e.dir, e.name)
		args := []string{"build", "-o", e.bin}
		if raceEnabled() {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			e.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.bin
}

// Run runs the example with args until it exits or t's context ends, logs its
// output, and returns its stdout and exit status. It fails t when the example
// cannot be started.
func (e *Example) Run(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), e.Binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s %v: %v", e.name, args, err)
	}
	t.Logf("%s %s (exit %d)\n%s%s", e.name, strings.Join(args, " "), code, stdout.String(), stderr.String())
	return stdout.String(), code
}

// Close removes the built binary. Call it from TestMain after m.Run.
func (e *Example) Close() {
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// raceEnabled reports whether the test binary was built with -race, so the example
// is built the same way.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
