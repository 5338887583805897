package nilness_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/core/nilness"
)

type ptr struct{}

func TestIsNil(t *testing.T) {
	var (
		p  *ptr
		m  map[string]int
		f  func()
		ch chan int
		i  any = p
	)
	for _, v := range []any{nil, p, m, f, ch, i} {
		if !nilness.IsNil(v) {
			t.Errorf("IsNil(%T) = false", v)
		}
	}
	for _, v := range []any{&ptr{}, ptr{}, 0, "", map[string]int{}, func() {}} {
		if nilness.IsNil(v) {
			t.Errorf("IsNil(%T %v) = true", v, v)
		}
	}
}
