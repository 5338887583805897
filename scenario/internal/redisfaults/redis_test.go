package redisfaults_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/scenario"
)

// node is the package's throwaway Redis, started by the first test that needs it,
// in the test process only (a worker gets its URL from Config.Setup).
var node redistest.Node

func TestMain(m *testing.M) { scenario.Main(m, func() { node.Close() }) }

const key = "invoice:42"

// config is the invoice job on Redis: each worker takes the account's lock and
// sets the invoice key, fenced through redisfence or, when bare, with a plain SET;
// it reaches "in transaction" before the fenced transaction is sent.
func config(bare bool) scenario.Config {
	return scenario.Config{
		Workers: []string{"a", "b"},
		Setup: func(t *testing.T) string {
			o := node.Options(t)
			return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
		},
		Job: func(ctx context.Context, w *scenario.Worker) error {
			rdb, err := client(w.Data())
			if err != nil {
				return err
			}
			defer rdb.Close()
			store, err := redisfence.New(rdb)
			if err != nil {
				return err
			}
			l, err := w.Acquire(ctx, "invoice-42")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			value := fmt.Sprintf("%s@%d", w.Name(), l.Token())
			return w.Write(ctx, l, value, func(ctx context.Context) error {
				if bare {
					if err := rdb.Set(ctx, key, value, 0).Err(); err != nil {
						return err
					}
					return w.Reach(ctx, "in transaction")
				}
				return store.Fenced(ctx, l, func(tx redis.Pipeliner) error {
					tx.Set(ctx, key, value, 0)
					return w.Reach(ctx, "in transaction")
				})
			})
		},
		Read: func(ctx context.Context, url string) (map[string]string, error) {
			rdb, err := client(url)
			if err != nil {
				return nil, err
			}
			defer rdb.Close()
			v, err := rdb.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				return map[string]string{}, nil
			}
			return map[string]string{"invoice-42": v}, err
		},
	}
}

func client(url string) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(o), nil
}

func gcPause() []*scenario.Step {
	return []*scenario.Step{
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
		scenario.Start("b"),
	}
}

// TestRun_faults freezes, kills, cuts off and slows worker a on Redis: the fenced
// job keeps the guarantee (Run checks the history) and b's invoice stands.
func TestRun_faults(t *testing.T) {
	for _, f := range []struct {
		name  string
		steps []*scenario.Step
	}{
		{"freeze", gcPause()},
		{"kill", []*scenario.Step{
			scenario.Start("a"),
			scenario.Kill("a").When("a", "in transaction"),
			scenario.Start("b"),
		}},
		{"cutoff", []*scenario.Step{
			scenario.Start("a"),
			scenario.CutOff("a").When("a", scenario.Granted).Until("b", scenario.Finished),
			scenario.Freeze("a").When("a", scenario.AboutToWrite),
			scenario.Start("b"),
		}},
		{"slow", []*scenario.Step{
			scenario.Start("a"),
			scenario.Slow("a", 3*time.Second).When("a", scenario.Granted),
			scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
			scenario.Start("b"),
		}},
	} {
		t.Run(f.name, func(t *testing.T) {
			h := scenario.Run(t, config(false), f.steps...)
			if v := h.Final["invoice-42"]; v == "" || v[0] != 'b' {
				t.Fatalf("final %v: want b's invoice\n%s", h.Final, h.Timelines())
			}
		})
	}
}

func TestRecord_gcPause_redisBare(t *testing.T) {
	h := scenario.Record(t, config(true), gcPause()...)
	if err := h.Check(); !errors.Is(err, scenario.ErrViolation) {
		t.Fatalf("Check() = %v; want a violation: a's stale SET landed over b's", err)
	}
}
