//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// History is everything the checker judges: what the workers say they did (their
// JSON logs) and what the database holds afterwards.
type History struct {
	Events   []Event        // every worker's events
	Accounts map[string]Row // billing_accounts, by account
	Ledger   []LedgerRow    // billing_writes in insert order
	Kills    map[string]int // SIGKILLs per worker: each may leave one commit unlogged
}

// Row is one billing_accounts row: the counter and the tokens of the writes that
// produced it, appended by each read-modify-write.
type Row struct {
	Balance int64
	Tokens  []int64
}

// LedgerRow is one billing_writes row, inserted in the same transaction as the
// counter update it records.
type LedgerRow struct {
	Seq     int64
	Account string
	Token   int64
	Worker  string
	Balance int64
}

// Report is the checker's verdict and the counts it saw.
type Report struct {
	Acquired      int // lock grants logged
	Acked         int // acknowledged (committed and logged) writes
	Committed     int // writes the database holds (ledger rows)
	Unlogged      int // committed, never acknowledged: commit outcome unknown, or a worker killed before it could log
	RefusedDB     int // writes the database refused (stale token)
	RefusedCli    int // writes refused before any I/O (lock known lost)
	Aborted       int // writes that failed and were rolled back (cancelled, connection lost)
	AbortedLate   int // of those, the ones that failed after their writes were made (in or around COMMIT)
	Unknown       int // writes whose COMMIT outcome the worker could not know (fence.ErrCommitUnknown)
	UnknownLanded int // of those, the ones the database holds
	Violations    []string
}

func (r Report) String() string {
	return fmt.Sprintf("jobs (lock grants) %d, acknowledged writes %d, committed %d (not acknowledged: %d), refused stale by the database %d, refused as lost by the client %d, failed and rolled back %d (%d after their writes), commit outcome unknown %d (landed %d, not landed %d), violations %d",
		r.Acquired, r.Acked, r.Committed, r.Unlogged, r.RefusedDB, r.RefusedCli, r.Aborted, r.AbortedLate, r.Unknown, r.UnknownLanded, r.Unknown-r.UnknownLanded, len(r.Violations))
}

// LoadHistory reads the database state the checker needs. tokens is the SQL
// expression that reads billing_accounts.tokens as comma-separated text.
func LoadHistory(ctx context.Context, db *sql.DB, tokens string, events []Event, kills map[string]int) (History, error) {
	h := History{Events: events, Accounts: map[string]Row{}, Kills: kills}
	rows, err := db.QueryContext(ctx, `SELECT account, balance, `+tokens+` FROM billing_accounts`)
	if err != nil {
		return h, err
	}
	defer rows.Close()
	for rows.Next() {
		var acct, list string
		var r Row
		if err := rows.Scan(&acct, &r.Balance, &list); err != nil {
			return h, err
		}
		if r.Tokens, err = parseTokens(list); err != nil {
			return h, fmt.Errorf("%s: %w", acct, err)
		}
		h.Accounts[acct] = r
	}
	if err := rows.Err(); err != nil {
		return h, err
	}
	rows, err = db.QueryContext(ctx, `SELECT seq, account, token, worker, balance FROM billing_writes ORDER BY seq`)
	if err != nil {
		return h, err
	}
	for rows.Next() {
		var l LedgerRow
		if err := rows.Scan(&l.Seq, &l.Account, &l.Token, &l.Worker, &l.Balance); err != nil {
			return h, err
		}
		h.Ledger = append(h.Ledger, l)
	}
	return h, rows.Err()
}

// parseTokens parses a comma-separated list of tokens.
func parseTokens(list string) ([]int64, error) {
	var out []int64
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("tokens %q: %w", list, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// Check judges a history:
//   - no acknowledged write lost: every acknowledged write is in the ledger and its
//     token is in the account's row at the position of its value;
//   - a write whose commit outcome was unknown may have landed or not, but wholly
//     (ledger row and token in the row together, with the value it wrote); one that
//     landed counts like an acknowledged one;
//   - no refused or failed (rolled back) write is in the database;
//   - the final counter equals the acknowledged increments plus the unknown ones
//     that landed (plus at most one unlogged commit per crash of its worker), and
//     every committed increment is in it (a lost update is a ledger row the counter
//     does not count);
//   - per account, committed tokens never go down (no stale write landed after a
//     newer one), and no token was granted to two holders.
func Check(h History) Report {
	c := &checker{h: h, grants: map[int64]Event{}, acks: map[key]Event{}, refused: map[key]Event{},
		aborted: map[key]Event{}, unknown: map[key]Event{}, ledger: map[key]LedgerRow{}, perAccount: map[string][]LedgerRow{}}
	c.readEvents()
	c.readLedger()
	c.checkLanded()
	c.checkAccounts()
	return c.r
}

type key struct {
	account string
	token   int64
}

// checker holds what the workers logged and what the ledger holds, by account and
// token.
type checker struct {
	h          History
	r          Report
	grants     map[int64]Event
	acks       map[key]Event
	refused    map[key]Event
	aborted    map[key]Event
	unknown    map[key]Event
	ledger     map[key]LedgerRow
	perAccount map[string][]LedgerRow
	counted    map[string]int // per account: the increments the counter must hold
}

func (c *checker) bad(format string, args ...any) {
	c.r.Violations = append(c.r.Violations, fmt.Sprintf(format, args...))
}

// readEvents indexes the workers' outcomes.
func (c *checker) readEvents() {
	for _, ev := range c.h.Events {
		k := key{ev.Account, ev.Token}
		switch ev.Kind {
		case "acquired":
			c.r.Acquired++
			if g, ok := c.grants[ev.Token]; ok && (g.Worker != ev.Worker || g.Account != ev.Account) {
				c.bad("token %d granted twice: to %s for %s and to %s for %s", ev.Token, g.Worker, g.Account, ev.Worker, ev.Account)
			}
			c.grants[ev.Token] = ev
		case "commit":
			c.r.Acked++
			if _, dup := c.acks[k]; dup {
				c.bad("%s: token %d acknowledged twice", ev.Account, ev.Token)
			}
			c.acks[k] = ev
		case "refused":
			if ev.Reason == "stale" {
				c.r.RefusedDB++
			} else {
				c.r.RefusedCli++
			}
			c.refused[k] = ev
		case "aborted":
			c.r.Aborted++
			if ev.Reason == "after its writes" {
				c.r.AbortedLate++
			}
			c.aborted[k] = ev
		case "unknown":
			c.r.Unknown++
			c.unknown[k] = ev
		}
	}
	for k, ev := range c.acks {
		if g, ok := c.grants[k.token]; !ok || g.Worker != ev.Worker || g.Account != ev.Account {
			c.bad("%s: %s acknowledged a write with token %d it was not granted", k.account, ev.Worker, k.token)
		}
	}
}

// readLedger indexes the ledger and holds it to the writes reported as not landed.
func (c *checker) readLedger() {
	for _, l := range c.h.Ledger {
		c.r.Committed++
		k := key{l.Account, l.Token}
		if _, dup := c.ledger[k]; dup {
			c.bad("%s: token %d committed twice", l.Account, l.Token)
		}
		c.ledger[k] = l
		c.perAccount[l.Account] = append(c.perAccount[l.Account], l)
		if ev, ok := c.refused[k]; ok {
			c.bad("%s: %s's write with token %d was reported refused (%s) but is in the database", l.Account, ev.Worker, l.Token, ev.Reason)
		}
		if ev, ok := c.aborted[k]; ok {
			c.bad("%s: %s's write with token %d was reported failed and rolled back (%s) but is in the database", l.Account, ev.Worker, l.Token, ev.Err)
		}
	}
}

// checkLanded holds the database to the acknowledged writes and reads back the fate
// of the unknown ones; it sets the increments each counter must hold.
func (c *checker) checkLanded() {
	c.counted = map[string]int{}
	for k, ev := range c.acks {
		c.counted[k.account]++
		if l, ok := c.ledger[k]; !ok || l.Worker != ev.Worker || l.Balance != ev.Value {
			c.bad("%s: acknowledged write by %s (token %d, value %d) is not in the database", k.account, ev.Worker, k.token, ev.Value)
			continue
		}
		c.survives("acknowledged", k, ev)
	}
	for k, ev := range c.unknown {
		l, inLedger := c.ledger[k]
		inRow := slices.Contains(c.h.Accounts[k.account].Tokens, k.token) // which unknowns landed, read back
		switch {
		case !inLedger && inRow:
			// The row and the ledger are written in one transaction.
			c.bad("%s: write by %s with unknown outcome (token %d) half landed: in the row, not in the ledger", k.account, ev.Worker, k.token)
		case !inLedger:
		case l.Worker != ev.Worker || l.Balance != ev.Value:
			c.bad("%s: write with unknown outcome (token %d) landed as %s value %d, but %s wrote value %d", k.account, k.token, l.Worker, l.Balance, ev.Worker, ev.Value)
		default:
			c.r.UnknownLanded++
			c.counted[k.account]++
			c.survives("landed", k, ev)
		}
	}
	// Commits nobody logged an outcome for: a worker killed between commit and log.
	unlogged := map[string]int{}
	for k, l := range c.ledger {
		if _, ok := c.acks[k]; ok {
			continue
		}
		c.r.Unlogged++
		if _, ok := c.unknown[k]; !ok {
			unlogged[l.Worker]++
			c.counted[l.Account]++
		}
	}
	for w, n := range unlogged {
		if n > c.h.Kills[w] {
			c.bad("%s: %d committed writes were never acknowledged, but it crashed %d times", w, n, c.h.Kills[w])
		}
	}
}

// survives checks that a landed write's token is in its account's row at the
// position of its value: no later write overwrote it.
func (c *checker) survives(what string, k key, ev Event) {
	row := c.h.Accounts[k.account]
	if ev.Value < 1 || ev.Value > int64(len(row.Tokens)) || row.Tokens[ev.Value-1] != k.token {
		c.bad("%s: %s write by %s (token %d, value %d) was lost: a later write overwrote it", k.account, what, ev.Worker, k.token, ev.Value)
	}
}

// checkAccounts holds each counter to the writes that landed, and the order of
// their tokens.
func (c *checker) checkAccounts() {
	accounts := make([]string, 0, len(c.h.Accounts))
	for a := range c.h.Accounts {
		accounts = append(accounts, a)
	}
	sort.Strings(accounts)
	for _, a := range accounts {
		row := c.h.Accounts[a]
		ls := c.perAccount[a]
		if row.Balance != int64(len(row.Tokens)) {
			c.bad("%s: counter %d but %d writes recorded in the row", a, row.Balance, len(row.Tokens))
		}
		if lost := len(ls) - int(row.Balance); lost != 0 {
			c.bad("%s: %d increments committed, counter is %d: %d updates lost", a, len(ls), row.Balance, lost)
		}
		if want := int64(c.counted[a]); row.Balance != want {
			c.bad("%s: final counter %d, but acknowledged increments plus landed unknown ones are %d", a, row.Balance, want)
		}
		for i := 1; i < len(ls); i++ {
			if ls[i].Token <= ls[i-1].Token {
				c.bad("%s: committed tokens went down: %d (%s) after %d (%s)", a, ls[i].Token, ls[i].Worker, ls[i-1].Token, ls[i-1].Worker)
			}
		}
		for i := 1; i < len(row.Tokens); i++ {
			if row.Tokens[i] <= row.Tokens[i-1] {
				c.bad("%s: tokens in the row went down: %v", a, row.Tokens)
				break
			}
		}
	}
}

// Verdict is the report as text for the test log.
func (r Report) Verdict() string {
	if len(r.Violations) == 0 {
		return "history checker: OK: " + r.String()
	}
	return "history checker: " + r.String() + "\n  " + strings.Join(r.Violations, "\n  ")
}

// CheckHistory loads the history of every worker of the topology and judges it.
func (e *Env) CheckHistory() Report {
	e.t.Helper()
	var events []Event
	e.mu.Lock()
	ws := append([]*Worker(nil), e.workers...)
	kills := map[string]int{}
	for k, v := range e.kills {
		kills[k] = v
	}
	e.mu.Unlock()
	for _, w := range ws {
		events = append(events, w.Events()...)
	}
	h, err := LoadHistory(e.t.Context(), e.DB, e.tokensColumn(), events, kills)
	if err != nil {
		e.t.Fatalf("load history: %v", err)
	}
	return Check(h)
}
