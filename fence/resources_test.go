package fence_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

func TestResources(t *testing.T) {
	tests := []struct {
		name string
		g    fence.Grant
		want []string
	}{
		{"one resource", fence.NewGrant("account-42", 3), []string{"account-42"}},
		{"set sorted", setGrant{fence.NewGrant("b", 3), []string{"c", "a", "b"}}, []string{"a", "b", "c"}},
		{"set repeats once", setGrant{fence.NewGrant("a", 3), []string{"b", "a", "b", "a"}}, []string{"a", "b"}},
		{"set of one", setGrant{fence.NewGrant("a", 3), []string{"a"}}, []string{"a"}},
		{"nil", nil, nil},
		{"typed nil", (*lostGrant)(nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fence.Resources(tt.g); !slices.Equal(got, tt.want) {
				t.Fatalf("Resources = %q, want %q", got, tt.want)
			}
		})
	}
	// The set's own slice is not reordered.
	res := []string{"c", "a"}
	fence.Resources(setGrant{fence.NewGrant("c", 3), res})
	if !slices.Equal(res, []string{"c", "a"}) {
		t.Fatalf("Resources reordered the set's slice: %q", res)
	}
}

func TestCheckLost(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	tests := []struct {
		name string
		g    fence.Grant
		lost bool
	}{
		{"not watched", fence.NewGrant("a", 3), false},
		{"watched, held", lostGrant{fence.NewGrant("a", 3), make(chan struct{})}, false},
		{"watched, nil Done", lostGrant{fence.NewGrant("a", 3), nil}, false},
		{"watched, lost", lostGrant{fence.NewGrant("a", 3), closed}, true},
		{"typed nil", (*lostGrant)(nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fence.CheckLost(tt.g)
			if got := errors.Is(err, fence.ErrLost); got != tt.lost {
				t.Fatalf("CheckLost = %v, want lost %v", err, tt.lost)
			}
			if tt.lost && !strings.Contains(err.Error(), `"a" at token 3`) {
				t.Fatalf("CheckLost = %v, want it to name the resource and token", err)
			}
		})
	}
}
