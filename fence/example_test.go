package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencegate/fencegate/fence"
)

// memStore shows the shape of the Store contract on a map: the marks and the data
// change together or not at all. A real adapter keeps both in the database.
type memStore struct {
	mu    sync.Mutex
	marks map[string]fence.Token
	data  map[string]string
}

// memTx is the transaction type fn receives: writes are staged until commit.
type memTx struct{ writes map[string]string }

func (tx *memTx) Set(key, value string) { tx.writes[key] = value }

func (s *memStore) Fenced(ctx context.Context, g fence.Grant, fn func(*memTx) error) error {
	s.mu.Lock() // held to commit: a concurrent holder waits, as on a locked mark row
	defer s.mu.Unlock()
	resources := fence.Resources(g) // sorted: overlapping sets lock in one order
	for _, r := range resources {
		if seen := s.marks[r]; seen > g.Token() {
			return &fence.StaleError{Resource: r, Presented: g.Token(), Seen: seen}
		}
	}
	tx := &memTx{writes: map[string]string{}}
	if err := fn(tx); err != nil {
		return err // nothing staged is applied
	}
	if err := fence.CheckLost(g); err != nil {
		return err // the lock passed on while fn ran: commit nothing
	}
	for _, r := range resources {
		s.marks[r] = g.Token()
	}
	for k, v := range tx.writes {
		s.data[k] = v
	}
	return nil
}

// The GC-pause timeline: server 1 holds token 33, freezes, and its lock passes to
// server 2 (token 34), which writes. Server 1 wakes and writes with token 33: refused,
// and the invoice keeps server 2's total.
func ExampleExec() {
	ctx := context.Background()
	store := &memStore{marks: map[string]fence.Token{}, data: map[string]string{}}
	write := func(token fence.Token, total string) error {
		return fence.Exec(ctx, store, fence.NewGrant("account-42", token), func(tx *memTx) error {
			tx.Set("invoice/42", total)
			return nil
		})
	}

	fmt.Println("server 2, token 34:", write(34, "120.00"))
	err := write(33, "100.00")
	fmt.Println("server 1, token 33:", err)

	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("stop: a newer holder wrote with token", stale.Seen)
	}
	fmt.Println("invoice/42 =", store.data["invoice/42"])
	fmt.Println("token 0:", write(0, "0.00"))
	// Output:
	// server 2, token 34: <nil>
	// server 1, token 33: fence: stale token 33 for "account-42": 34 already seen
	// stop: a newer holder wrote with token 34
	// invoice/42 = 120.00
	// token 0: fence: invalid token 0 for "account-42": tokens are > 0: fence: invalid argument
}
