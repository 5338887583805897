//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

// Row is one billing_accounts row: the counter and the tokens of the writes that
// produced it, appended by each read-modify-write.
type Row struct {
	Balance int64
	Tokens  []int64
}

// Report is the scenario kit's verdict on a run (scenario.History.Check) and its
// counts, named as the tests ask for them.
type Report struct {
	Counts                       scenario.Counts
	Acked, RefusedDB, RefusedCli int // acknowledged; refused stale by the database; refused as lost by the client
	Unknown, UnknownLanded       int // commit outcome unknown (fence.ErrCommitUnknown); of those, landed
	Committed                    int // ledger rows
	Violations                   []string
}

func report(h *scenario.History) Report {
	c := h.Counts()
	r := Report{Counts: c, Acked: c.Outcomes[scenario.Acknowledged], RefusedDB: c.Outcomes[scenario.RefusedStale],
		RefusedCli: c.Outcomes[scenario.RefusedLost], Unknown: c.Outcomes[scenario.CommitUnknown],
		UnknownLanded: c.Landed, Committed: c.Committed}
	var v *scenario.ViolationError
	if err := h.Check(); errors.As(err, &v) {
		r.Violations = v.Violations
	} else if err != nil {
		r.Violations = []string{err.Error()}
	}
	return r
}

// Verdict is the report as text for the test log.
func (r Report) Verdict() string {
	if len(r.Violations) == 0 {
		return "history check: OK: " + r.Counts.String()
	}
	return fmt.Sprintf("history check: %s; %d violation(s):\n  %s", r.Counts, len(r.Violations), strings.Join(r.Violations, "\n  "))
}

// LoadHistory makes a scenario.History of what the workers logged (events, in time
// order) and what the database holds: each account is a resource whose final value
// is its counter and whose kept tokens are the row's; each billing_writes row, in
// insert order, is a commit; each SIGKILL of a worker is a crash. tokens is the SQL
// expression that reads billing_accounts.tokens as comma-separated text.
func LoadHistory(ctx context.Context, db *sql.DB, tokens string, events []Event, kills map[string]int) (*scenario.History, error) {
	h := fromEvents(events)
	h.Crashes = kills
	h.Final, h.Kept, h.Commits = map[string]string{}, map[string][]fence.Token{}, []scenario.CommitRecord{}
	rows, err := db.QueryContext(ctx, `SELECT account, balance, `+tokens+` FROM billing_accounts`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var acct, list string
		var r Row
		if err := rows.Scan(&acct, &r.Balance, &list); err != nil {
			return nil, err
		}
		if r.Tokens, err = parseTokens(list); err != nil {
			return nil, fmt.Errorf("%s: %w", acct, err)
		}
		h.Final[acct] = strconv.FormatInt(r.Balance, 10)
		h.Kept[acct] = []fence.Token{}
		for _, t := range r.Tokens {
			h.Kept[acct] = append(h.Kept[acct], fence.Token(t))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = db.QueryContext(ctx, `SELECT account, token, worker, balance FROM billing_writes ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c scenario.CommitRecord
		var balance int64
		if err := rows.Scan(&c.Resource, &c.Token, &c.Worker, &balance); err != nil {
			return nil, err
		}
		c.Value = strconv.FormatInt(balance, 10)
		h.Commits = append(h.Commits, c)
	}
	return h, rows.Err()
}

// writeOutcome maps a worker's logged outcome of a write to the kit's.
func writeOutcome(ev Event) (scenario.Outcome, bool) {
	switch ev.Kind {
	case "commit":
		return scenario.Acknowledged, true
	case "refused":
		if ev.Reason == "stale" {
			return scenario.RefusedStale, true
		}
		return scenario.RefusedLost, true
	case "aborted":
		return scenario.RolledBack, true
	case "unknown":
		return scenario.CommitUnknown, true
	}
	return "", false
}

// fromEvents records the workers' grants and writes in time order. A write begins
// at its grant (its read-modify-write cannot start sooner) and ends at its outcome.
func fromEvents(events []Event) *scenario.History {
	evs := append([]Event(nil), events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	h := &scenario.History{}
	type grant struct {
		worker, account string
		token           int64
	}
	granted := map[grant]int{}
	var start time.Time
	if len(evs) > 0 {
		start = evs[0].Time
	}
	for i, ev := range evs {
		h.Events = append(h.Events, scenario.Event{Seq: i, At: ev.Time.Sub(start), Worker: ev.Worker, What: ev.Describe()})
		g := grant{ev.Worker, ev.Account, ev.Token}
		if ev.Kind == "acquired" {
			granted[g] = i
			h.Grants = append(h.Grants, scenario.GrantRecord{Worker: ev.Worker, Resource: ev.Account, Token: fence.Token(ev.Token), Seq: i})
		}
		o, ok := writeOutcome(ev)
		if !ok {
			continue
		}
		begin, ok := granted[g]
		if !ok {
			begin = i
		}
		value := "" // a refused write logs no value: it wrote none
		if ev.Value > 0 {
			value = strconv.FormatInt(ev.Value, 10)
		}
		h.Writes = append(h.Writes, scenario.WriteRecord{Worker: ev.Worker, Resource: ev.Account, Value: value,
			Token: fence.Token(ev.Token), Outcome: o, Err: ev.Err, Begin: begin, End: i})
	}
	return h
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

// CheckHistory loads the history of every worker of the topology and judges it
// with the scenario kit's checker.
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
	return report(h)
}
