package redisfence_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
)

const writers, rounds, trials = 16, 5, 6

// TestStore_Set_racingWriters races 16 writers with tokens 1 to 16 on one key,
// each writing 5 times and stopping once refused, while a reader watches the
// stored token: it only rises, every refusal names a higher token, and the final
// value is the highest token's last write, all of whose writes were accepted.
func TestStore_Set_racingWriters(t *testing.T) {
	e := newEnv(t)
	for trial := range trials {
		if problems := race(t, e, fmt.Sprint("hot-", trial)); len(problems) > 0 {
			t.Fatalf("trial %d: %v", trial, problems)
		}
	}
}

// TestStore_Set_racingWritersUnchecked runs the same race with the write script's
// check taken out: the checks above must catch it.
func TestStore_Set_racingWritersUnchecked(t *testing.T) {
	e := newEnv(t, redisfence.WithUncheckedWritesForTest())
	caught := 0
	for trial := range trials {
		if problems := race(t, e, fmt.Sprint("hot-", trial)); len(problems) > 0 {
			caught++
			t.Logf("trial %d, unchecked: %v", trial, problems[0])
		}
	}
	if caught == 0 {
		t.Fatalf("the race with an unchecked script passed all %d trials: the test cannot fail", trials)
	}
}

// race runs one trial on a resource of its own and returns what went wrong.
func race(t *testing.T, e *env, name string) []string {
	t.Helper()
	res := e.res(name)
	key := e.key(res, "v")
	start, stop := make(chan struct{}), make(chan struct{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []string
		accepted = map[fence.Token]int{}
		seen     []fence.Token
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	reader := make(chan struct{})
	go func() {
		defer close(reader)
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, err := e.store.Get(t.Context(), fence.NewGrant(res, writers), key)
			switch {
			case err == nil:
				seen = append(seen, v.Token)
			case !errors.Is(err, fence.ErrNotFound):
				report("Get: %v", err)
				return
			}
		}
	}()
	for w := 1; w <= writers; w++ {
		wg.Go(func() {
			g := fence.NewGrant(res, fence.Token(w))
			<-start
			for r := range rounds {
				err := e.store.Set(t.Context(), g, key, fmt.Sprintf("token %d round %d", w, r), 0)
				var se *fence.StaleError
				switch {
				case err == nil:
					mu.Lock()
					accepted[g.Token()]++
					mu.Unlock()
				case errors.As(err, &se):
					if se.Seen <= se.Presented {
						report("refused token %d with %d seen", se.Presented, se.Seen)
					}
					return // a stale holder stops
				default:
					report("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	<-reader
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			report("stored token went down: %d after %d", seen[i], seen[i-1])
			break
		}
	}
	want := fmt.Sprintf("token %d round %d", writers, rounds-1)
	if v, _ := e.get(t, key); v != want {
		report("final value %q, want %q", v, want)
	}
	if m := e.mark(t, res); m != writers {
		report("final mark %d, want %d", m, writers)
	}
	if accepted[writers] != rounds {
		report("the highest token had %d of %d writes accepted", accepted[writers], rounds)
	}
	return problems
}
