package s3fence_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
)

// TestStore_Put_racingWriters races writers with rising tokens on one key, each
// writing several times, while a reader watches the stored token: it only rises,
// every refusal names a higher token, and the final object is the highest token's
// last write. Then the key is deleted by the highest token, and a stale holder can
// neither delete it nor bring it back.
func TestStore_Put_racingWriters(t *testing.T) {
	e := newEnv(t, s3fence.WithMaxAttempts(100))
	for trial := range 6 {
		t.Run(fmt.Sprint("trial ", trial), func(t *testing.T) { raceOnKey(t, e, fmt.Sprint("hot-", trial)) })
	}
}

func raceOnKey(t *testing.T, e *env, key string) {
	const writers, rounds = 16, 5
	start := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[fence.Token]int{}

	var seen []fence.Token
	reader := make(chan struct{})
	go func() {
		defer close(reader)
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, err := e.store.Head(t.Context(), e.bucket, key)
			if err == nil {
				seen = append(seen, v.Token)
			} else if !errors.Is(err, fence.ErrNotFound) {
				t.Errorf("Head() = %v", err)
				return
			}
		}
	}()
	for w := 1; w <= writers; w++ {
		wg.Go(func() {
			g := fence.NewGrant("hot", fence.Token(w))
			<-start
			for r := range rounds {
				_, err := e.store.Put(t.Context(), g, e.input(key, fmt.Sprintf("token %d round %d", w, r)))
				var se *fence.StaleError
				switch {
				case err == nil:
					mu.Lock()
					accepted[g.Token()]++
					mu.Unlock()
				case errors.As(err, &se):
					if se.Seen <= se.Presented {
						t.Errorf("refused token %d with %d seen", se.Presented, se.Seen)
					}
					return // a stale holder stops
				default:
					t.Errorf("writer %d: %v", w, err)
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
			t.Fatalf("stored token went down: %d after %d (reads %v)", seen[i], seen[i-1], seen)
		}
	}
	body, tok, _ := e.rawGet(t, key)
	if want := fmt.Sprintf("token %d round %d", writers, rounds-1); body != want || tok != fmt.Sprint(writers) {
		t.Fatalf("final object %q token %s, want %q", body, tok, want)
	}
	if accepted[writers] != rounds {
		t.Fatalf("the highest token had %d of %d writes accepted", accepted[writers], rounds)
	}
	t.Logf("%d reads of the token; accepted writes per token: %v", len(seen), accepted)

	if err := e.store.Delete(t.Context(), fence.NewGrant("hot", writers), e.bucket, key); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	stale := fence.NewGrant("hot", writers-1)
	if err := e.store.Delete(t.Context(), stale, e.bucket, key); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Delete = %v", err)
	}
	if _, err := e.store.Put(t.Context(), stale, e.input(key, "resurrected")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale recreate = %v", err)
	}
	if _, err := e.store.Head(t.Context(), e.bucket, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Head after delete = %v", err)
	}
}
