package s3test_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/adapters/s3fence/s3test"
)

// TestStart_envMissing checks that a FENCEGATE_VERSITYGW naming no file is an
// error that names the variable, rather than a build.
func TestStart_envMissing(t *testing.T) {
	const env = "FENCEGATE_VERSITYGW"
	t.Setenv(env, "/nonexistent/versitygw")
	if srv, err := s3test.Start(t.Context()); err == nil || !strings.Contains(err.Error(), env) {
		if srv != nil {
			srv.Close()
		}
		t.Fatalf("Start() = %v, want an error naming %s", err, env)
	}
}

// TestServer_conditionalWrites checks what s3fence relies on, on the server a zero
// Server starts: If-None-Match: * refuses an existing key and If-Match a stale ETag,
// both with 412.
func TestServer_conditionalWrites(t *testing.T) {
	var srv s3test.Server
	t.Cleanup(func() { srv.Close() })
	c, bucket := srv.Bucket(t)
	put := func(body string, mod func(*s3.PutObjectInput)) (*s3.PutObjectOutput, error) {
		in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader(body)}
		mod(in)
		return c.PutObject(t.Context(), in)
	}
	first, err := put("one", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*s3.PutObjectInput)
	}{
		{"if-none-match on an existing key", func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }},
		{"if-match on another etag", func(in *s3.PutObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) }},
	}
	for _, tt := range tests {
		var ae smithy.APIError
		if _, err := put("two", tt.mod); !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
			t.Errorf("%s: %v, want PreconditionFailed", tt.name, err)
		}
	}
	if _, err := put("two", func(in *s3.PutObjectInput) { in.IfMatch = first.ETag }); err != nil {
		t.Fatalf("if-match on the current etag: %v", err)
	}
}
