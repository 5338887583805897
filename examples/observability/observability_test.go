package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun_scenario(t *testing.T) {
	var out, logs bytes.Buffer
	if code := run(t.Context(), nil, &out, &logs); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &logs)
	}
	for _, want := range []string{
		`fencegate_fenced_writes_total{adapter="sqlfence",result="accepted"} 4`,
		`fencegate_fenced_writes_total{adapter="sqlfence",result="stale"} 1`,
		`fencegate_lock_acquisitions_total{result="granted"} 6`,
		`fencegate_lock_losses_total{cause="not_renewed"} 1`,
		`fencegate_locks_held 0`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, &out)
		}
	}
	for _, want := range []string{
		`"msg":"fenced write refused"`, `"stored_token":`,
		`"msg":"lock lost","component":"lockclient","lock":"report"`, `"cause":"not_renewed"`,
		`"msg":"lock granted"`, `"msg":"lock released"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, &logs)
		}
	}
}

func TestRun_badFlags(t *testing.T) {
	for _, args := range [][]string{{"-log-level", "loud"}, {"extra"}, {"-nope"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
