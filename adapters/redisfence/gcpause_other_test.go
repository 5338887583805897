//go:build !unix

package redisfence_test

const childEnv = "REDISFENCE_TEST_CHILD"

func runChild() int { return 0 }
