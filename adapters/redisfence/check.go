package redisfence

import (
	"fmt"
	"reflect"

	"github.com/fencegate/fencegate/fence"
)

// checkSingle refuses what fence.CheckGrant refuses, and a grant set of several
// resources: a single-key write fences one resource, and a set's token says nothing
// about which of its resources the key belongs to. A set of one is that resource's
// grant.
func checkSingle(g fence.Grant) error {
	if err := fence.CheckGrant(g); err != nil {
		return err
	}
	if n := len(fence.Resources(g)); n > 1 {
		return fmt.Errorf("%w: grant %q covers %d resources: a single-resource write fences one; write a grant set's resources in a fenced transaction", fence.ErrInvalidArgument, g.Resource(), n)
	}
	return nil
}

// isNil reports whether v is nil or an interface holding a nil pointer, map, slice,
// channel or func, which the package refuses rather than panic on a method call.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
