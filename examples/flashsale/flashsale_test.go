package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/internal/tests/exampletest"
)

// example is the program under test, built once per test binary and run as a user
// runs it: a separate process with flags.
var example = exampletest.New("flashsale")

var (
	postgres = pgtest.New()
	mariadb  = mysqltest.New()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, err := range []error{postgres.Close(), mariadb.Close()} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	example.Close()
	os.Exit(code)
}

var countRE = regexp.MustCompile(`(?m)^  (sold|sold out|items left|orders|charges|replays|receipts) +(\d+)`)

// counts reads the numbers a run printed. The sale comes before the payment, so
// each name appears once.
func counts(t *testing.T, out string) map[string]int64 {
	t.Helper()
	c := map[string]int64{}
	for _, m := range countRE.FindAllStringSubmatch(out, -1) {
		n, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		c[m[1]] = n
	}
	return c
}

func wantGuarded(t *testing.T, out string, code int, buyers, items int64) {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	want := map[string]int64{
		"sold": items, "sold out": buyers - items, "items left": 0, "orders": items,
		"charges": 1, "replays": 99, "receipts": 1,
	}
	got := counts(t, out)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	for _, line := range []string{"same key, $75.00: refused (nolock.ErrKeyReused)", "  OK: exactly", "  OK: charged once"} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// TestFlashSale_sqlite runs the example as a newcomer does, with no flags.
func TestFlashSale_sqlite(t *testing.T) {
	out, code := example.Run(t)
	wantGuarded(t, out, code, 1000, 10)
}

// TestFlashSale_unguarded: the same sale with read-then-write oversells, and the
// payment without a key charges every retry; the example says so and exits 0, since
// that is what -unguarded claims to show.
func TestFlashSale_unguarded(t *testing.T) {
	out, code := example.Run(t, "-unguarded", "-sqlite", filepath.Join(t.TempDir(), "shop.db"))
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	c := counts(t, out)
	if c["sold"] <= 10 || c["charges"] != 100 {
		t.Fatalf("sold %d, charges %d; want more than 10 sold and 100 charges", c["sold"], c["charges"])
	}
	if !strings.Contains(out, "OVERSOLD") || !strings.Contains(out, "CHARGED 100 TIMES") {
		t.Fatal("output does not name the failures")
	}
}

func TestFlashSale_postgres(t *testing.T) {
	out, code := example.Run(t, "-postgres", postgres.DSN(t))
	wantGuarded(t, out, code, 1000, 10)
}

func TestFlashSale_mysql(t *testing.T) {
	out, code := example.Run(t, "-mysql", mariadb.DSN(t))
	wantGuarded(t, out, code, 1000, 10)
}

// TestFlashSale_rerun: a kept SQLite file can be used again; the shop's tables start
// afresh and the library's tables are kept.
func TestFlashSale_rerun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.db")
	for range 2 {
		out, code := example.Run(t, "-sqlite", path, "-buyers", "50", "-items", "7")
		wantGuarded(t, out, code, 50, 7)
	}
}

func TestFlashSale_badFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-buyers", "0"},
		{"-items", "1000"},
		{"-items", "-1"},
		{"-concurrent", "101"},
		{"-attempts", "1"},
		{"-postgres", "postgres://x", "-mysql", "u@tcp(x)/d"},
		{"extra"},
		{"-no-such-flag"},
	} {
		if _, code := example.Run(t, args...); code != 2 {
			t.Errorf("flashsale %v: exit status %d, want 2", args, code)
		}
	}
}
