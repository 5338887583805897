package typednil_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/typednil"
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
		if !typednil.Is(v) {
			t.Errorf("IsNil(%T) = false", v)
		}
	}
	for _, v := range []any{&ptr{}, ptr{}, 0, "", map[string]int{}, func() {}} {
		if typednil.Is(v) {
			t.Errorf("IsNil(%T %v) = true", v, v)
		}
	}
}
