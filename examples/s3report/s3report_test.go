package main_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/s3fence/s3test"
	"github.com/fencegate/fencegate/internal/tests/exampletest"
)

// example is the program under test, built once and run as a user runs it.
var example = exampletest.New("s3report")

// gateway is the real S3 server the runs write to (versitygw; see s3test), started
// by the first Bucket.
var gateway s3test.Server

func TestMain(m *testing.M) {
	code := m.Run()
	if err := gateway.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	example.Close()
	os.Exit(code)
}

var (
	tokenRE  = regexp.MustCompile(`holder (\d) takes nightly-report: token (\d+)`)
	readerRE = regexp.MustCompile(`A reader finds manifest.json written by (holder \d) \(token (\d+)\)`)
)

// TestS3report runs the timeline against a real S3 server: fenced, the stale
// manifest is refused and the reader finds holder 2's report; with -no-fence the
// stale report replaces it. Either way the exit status says the run showed what it
// claims, and the printed tokens back it.
func TestS3report(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		reader     string // who the reader finds
		mustOutput []string
	}{
		{"fenced", nil, "holder 2", []string{"presenting its lock: refused: fence: lock lost: \"nightly-report\"", "manifest.json: refused: fence: stale token", "The store refused holder 1's manifest"}},
		{"no-fence", []string{"-no-fence"}, "holder 1", []string{"with plain PutObjects: accepted", "Without fencing, holder 1's stale report"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, bucket := gateway.Bucket(t)
			args := append([]string{"-endpoint", gateway.Endpoint, "-access", gateway.AccessKey, "-secret", gateway.SecretKey, "-bucket", bucket}, tt.args...)
			out, code := example.Run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			for _, s := range tt.mustOutput {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q", s)
				}
			}
			toks := tokenRE.FindAllStringSubmatch(out, -1)
			r := readerRE.FindStringSubmatch(out)
			if len(toks) != 2 || r == nil {
				t.Fatalf("output lacks the tokens or the reader's line")
			}
			want := map[string]string{"holder 1": toks[0][2], "holder 2": toks[1][2]}
			if r[1] != tt.reader || r[2] != want[tt.reader] {
				t.Fatalf("reader found %s token %s, want %s token %s", r[1], r[2], tt.reader, want[tt.reader])
			}
		})
	}
}

func TestS3report_badFlags(t *testing.T) {
	for _, args := range [][]string{{"-bogus"}, {"-endpoint", "http://127.0.0.1:1", "-access", "", "-secret", ""}, {"extra"}} {
		if _, code := example.Run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
