// Package typednil tells a nil interface from one holding a nil pointer, map, slice,
// channel or func: fence and the adapters refuse both as "nil" rather than panic on a
// method call. It imports only the standard library, so fence may use it.
package typednil

import "reflect"

// Is reports whether v is nil or a typed nil (pointer, map, slice, chan, func,
// interface, unsafe pointer).
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
