package leadprocess_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/migrations"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The candidate process: this test binary run again with candidateEnv set to
// "ENDPOINTS|SQLITE-FILE|NAME". It runs Lead(NAME) with WithTTL(testTTL) until
// SIGTERM (which ends Lead's ctx: a resign). While it leads it makes a fenced
// write every 50 ms (a row of its token in lead_log); a write refused with
// fence.ErrStale (a newer token wrote, or an operator fenced) makes fn return
// it: the term ends and Lead campaigns again. It prints, one line each, with
// times in Unix nanoseconds on the machine's one clock:
//
//	begun TOKEN T          fn was called for a term
//	write TOKEN SEQ ok|refused ERR
//	stepdown TOKEN T       fn returns after a write refused with fence.ErrStale
//	lockended TOKEN T      the term's Lock ends (Observer.Ended: just before Done
//	                       closes, and before a release's Txn is sent)
//	ended TOKEN T CAUSE    fn saw the term's Done closed
//	deadline T             the Client's conservative session deadline after a
//	                       confirmed renewal (send time + TTL), or a new session
//	                       (now + TTL, above the grant's own)
const candidateEnv = "LOCKCLIENT_TEST_CANDIDATE"

const leadLogTable = `CREATE TABLE IF NOT EXISTS lead_log (id INTEGER PRIMARY KEY AUTOINCREMENT, token BIGINT NOT NULL, seq BIGINT NOT NULL, pid BIGINT NOT NULL)`

var sayMu sync.Mutex

func say(format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// deadlinePrinter is the candidate's Observer: it prints each new deadline.
type deadlinePrinter struct{}

func (deadlinePrinter) Acquired(string, time.Duration, error)                {}
func (deadlinePrinter) Retried(string, error)                                {}
func (deadlinePrinter) TermBegun(string, fence.Token)                        {}
func (deadlinePrinter) TermEnded(string, fence.Token, time.Duration, string) {}
func (deadlinePrinter) Ended(_ string, tok fence.Token, _ time.Duration, _ error) {
	say("lockended %d %d", tok, time.Now().UnixNano()) // just before Done closes (and before a release's Txn)
}
func (deadlinePrinter) KeepAlive(rtt time.Duration, err error) {
	if err == nil {
		say("deadline %d", time.Now().Add(-rtt).Add(testTTL).UnixNano())
	}
}
func (deadlinePrinter) Session(_ int, err error) {
	if err == nil {
		say("deadline %d", time.Now().Add(testTTL).UnixNano())
		return
	}
	say("session-lost %d %v", time.Now().UnixNano(), err)
}

func runCandidate(spec string) int {
	parts := strings.Split(spec, "|")
	eps, dbPath, name := strings.Split(parts[0], ","), parts[1], parts[2]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a forgotten candidate ends
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		say("error %v", err)
		return 1
	}
	c, err := lockclient.New(cli, lockclient.WithTTL(testTTL), lockclient.WithObserver(deadlinePrinter{}))
	if err != nil {
		say("error %v", err)
		return 1
	}
	db, err := sqlite.Open(dbPath)
	if err != nil {
		say("error %v", err)
		return 1
	}
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		say("error %v", err)
		return 1
	}
	err = c.Lead(ctx, name, func(term *lockclient.Lock) error {
		tok := term.Token()
		say("begun %d %d", tok, time.Now().UnixNano())
		for seq := 0; ; seq++ {
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := fence.Exec(wctx, store, term, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(wctx, `INSERT INTO lead_log (token, seq, pid) VALUES (?, ?, ?)`, int64(tok), seq, os.Getpid())
				return err
			})
			wcancel()
			if err != nil {
				say("write %d %d refused %v", tok, seq, err)
				if errors.Is(err, fence.ErrStale) {
					say("stepdown %d %d", tok, time.Now().UnixNano())
					return err // this term is over: Lead releases it and campaigns again
				}
			} else {
				say("write %d %d ok", tok, seq)
			}
			select {
			case <-term.Done():
				say("ended %d %d %v", tok, time.Now().UnixNano(), context.Cause(term.Context()))
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	say("lead returned %v", err)
	c.Close()
	return 0
}
