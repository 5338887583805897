package s3fence_test

const childEnv = "S3FENCE_TEST_CHILD"

func runChild() int { return 0 }
