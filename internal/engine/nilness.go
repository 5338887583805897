package engine

import "reflect"

// IsNil reports whether v is nil or holds a nil pointer, map, slice, channel or
// function: a typed nil that satisfies an interface but whose methods would
// dereference it.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
