package fence_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

// ptrGrant is a grant type with pointer receivers that dereference, as
// *lockclient.Lock's do.
type ptrGrant struct {
	res string
	tok fence.Token
}

func (g *ptrGrant) Resource() string   { return g.res }
func (g *ptrGrant) Token() fence.Token { return g.tok }

// TestTypedNil_entryPoints passes typed nil grants and stores to every entry point of
// fence: each returns ErrInvalidArgument, none panics.
func TestTypedNil_entryPoints(t *testing.T) {
	var nilGrant *ptrGrant
	var nilStore *recordingStore
	live := fence.NewGrant("r", 1)
	ok := func(int) error { return nil }
	tests := []struct {
		name string
		call func() error
	}{
		{"CheckGrant typed nil", func() error { return fence.CheckGrant(nilGrant) }},
		{"Exec typed nil grant", func() error { return fence.Exec(t.Context(), &recordingStore{}, nilGrant, ok) }},
		{"Exec typed nil store", func() error { return fence.Exec[int](t.Context(), nilStore, live, ok) }},
		{"Exec nil fn", func() error { return fence.Exec(t.Context(), &recordingStore{}, live, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			if err := tt.call(); !errors.Is(err, fence.ErrInvalidArgument) {
				t.Fatalf("error = %v, want ErrInvalidArgument", err)
			}
		})
	}
}
