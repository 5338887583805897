//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"fmt"
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
	Acquired   int // lock grants logged
	Acked      int // acknowledged (committed and logged) writes
	Committed  int // writes the database holds (ledger rows)
	Unlogged   int // committed by a worker killed before it could log them
	RefusedDB  int // writes the database refused (stale token)
	RefusedCli int // writes refused before any I/O (lock known lost)
	Aborted    int // jobs that failed before their writes were made (cancelled, connection lost)
	Unknown    int // commits that failed to answer: they may or may not have landed
	Violations []string
}

func (r Report) String() string {
	return fmt.Sprintf("jobs (lock grants) %d, acknowledged writes %d, committed %d (not acknowledged: %d), refused stale by the database %d, refused as lost by the client %d, aborted %d, commit outcome unknown %d, violations %d",
		r.Acquired, r.Acked, r.Committed, r.Unlogged, r.RefusedDB, r.RefusedCli, r.Aborted, r.Unknown, len(r.Violations))
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
//     token is in the account's row at the position of its value, and the final
//     counter equals the acknowledged increments (plus at most one unlogged commit
//     per crash of the worker that made it);
//   - every committed increment is in the counter (a lost update is a ledger row
//     the counter does not count);
//   - per account, committed tokens never go down;
//   - no token granted to two holders, and no refused write left a trace.
func Check(h History) Report {
	var r Report
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }

	type key struct {
		account string
		token   int64
	}
	grants := map[int64]Event{}
	acks := map[key]Event{}
	ackCount := map[string]int{}
	refused := map[key]Event{}
	unknown := map[key]bool{} // commits whose outcome the worker could not know
	for _, ev := range h.Events {
		switch ev.Kind {
		case "acquired":
			r.Acquired++
			if g, ok := grants[ev.Token]; ok && (g.Worker != ev.Worker || g.Account != ev.Account) {
				bad("token %d granted twice: to %s for %s and to %s for %s", ev.Token, g.Worker, g.Account, ev.Worker, ev.Account)
			}
			grants[ev.Token] = ev
		case "commit":
			r.Acked++
			k := key{ev.Account, ev.Token}
			if _, dup := acks[k]; dup {
				bad("%s: token %d acknowledged twice", ev.Account, ev.Token)
			}
			acks[k] = ev
			ackCount[ev.Account]++
		case "refused":
			if ev.Reason == "stale" {
				r.RefusedDB++
			} else {
				r.RefusedCli++
			}
			refused[key{ev.Account, ev.Token}] = ev
		case "aborted":
			r.Aborted++
		case "unknown":
			r.Unknown++
			unknown[key{ev.Account, ev.Token}] = true
		}
	}
	for k, ev := range acks {
		if g, ok := grants[k.token]; !ok || g.Worker != ev.Worker || g.Account != ev.Account {
			bad("%s: %s acknowledged a write with token %d it was not granted", k.account, ev.Worker, k.token)
		}
	}

	ledger := map[key]LedgerRow{}
	perAccount := map[string][]LedgerRow{}
	for _, l := range h.Ledger {
		r.Committed++
		k := key{l.Account, l.Token}
		if _, dup := ledger[k]; dup {
			bad("%s: token %d committed twice", l.Account, l.Token)
		}
		ledger[k] = l
		perAccount[l.Account] = append(perAccount[l.Account], l)
		if ev, ok := refused[k]; ok {
			bad("%s: %s's write with token %d was reported refused (%s) but is in the database", l.Account, ev.Worker, l.Token, ev.Reason)
		}
	}

	// Every acknowledged write is stored, and survives in the counter.
	for k, ev := range acks {
		l, ok := ledger[k]
		if !ok || l.Worker != ev.Worker || l.Balance != ev.Value {
			bad("%s: acknowledged write by %s (token %d, value %d) is not in the database", k.account, ev.Worker, k.token, ev.Value)
			continue
		}
		row := h.Accounts[k.account]
		if ev.Value < 1 || ev.Value > int64(len(row.Tokens)) || row.Tokens[ev.Value-1] != k.token {
			bad("%s: acknowledged write by %s (token %d, value %d) was lost: a later write overwrote it", k.account, ev.Worker, k.token, ev.Value)
		}
	}

	// Commits nobody acknowledged: a commit whose reply the worker did not get (it
	// logged "unknown"), or a worker killed between commit and log.
	unlogged := map[string]int{}
	unloggedIn := map[string]int{}
	for k, l := range ledger {
		if _, ok := acks[k]; ok {
			continue
		}
		unloggedIn[l.Account]++
		r.Unlogged++
		if !unknown[k] {
			unlogged[l.Worker]++
		}
	}
	for w, n := range unlogged {
		if n > h.Kills[w] {
			bad("%s: %d committed writes were never acknowledged, but it crashed %d times", w, n, h.Kills[w])
		}
	}

	accounts := make([]string, 0, len(h.Accounts))
	for a := range h.Accounts {
		accounts = append(accounts, a)
	}
	sort.Strings(accounts)
	for _, a := range accounts {
		row := h.Accounts[a]
		ls := perAccount[a]
		if row.Balance != int64(len(row.Tokens)) {
			bad("%s: counter %d but %d writes recorded in the row", a, row.Balance, len(row.Tokens))
		}
		if lost := len(ls) - int(row.Balance); lost != 0 {
			bad("%s: %d increments committed, counter is %d: %d updates lost", a, len(ls), row.Balance, lost)
		}
		if want := int64(ackCount[a] + unloggedIn[a]); row.Balance != want {
			bad("%s: final counter %d, acknowledged increments %d", a, row.Balance, want)
		}
		for i := 1; i < len(ls); i++ {
			if ls[i].Token <= ls[i-1].Token {
				bad("%s: committed tokens went down: %d (%s) after %d (%s)", a, ls[i].Token, ls[i].Worker, ls[i-1].Token, ls[i-1].Worker)
			}
		}
		for i := 1; i < len(row.Tokens); i++ {
			if row.Tokens[i] <= row.Tokens[i-1] {
				bad("%s: tokens in the row went down: %v", a, row.Tokens)
				break
			}
		}
	}
	return r
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
