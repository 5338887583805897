//go:build !unix

package s3fence_test

// The GC-pause timeline freezes a process with SIGSTOP: Unix only.
const childEnv = "S3FENCE_TEST_CHILD"

func runChild() int { return 2 }
