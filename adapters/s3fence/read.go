package s3fence

import (
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/fence"
)

// Object is an object read through the Store: its body, the version it is (for
// PutIfMatch) and the client's whole response (content type, length, metadata).
// The caller closes Body.
type Object struct {
	Body    io.ReadCloser
	Version Version
	Output  *s3.GetObjectOutput
}

// Get reads the object in names: its body with the version it is (its ETag, and
// the token of the grant that wrote it, 0 when written without this package), to
// pass to PutIfMatch. A tombstone left by Delete reads as fence.ErrNotFound, as a
// missing key does. With a nil g, Get reads for any reader, holding a lock or not.
// With a grant, for a read-modify-write under it, Get returns fence.ErrLost
// once a Watched grant's lock is lost, and refuses, after one GET and with the body
// closed, an object or tombstone whose token is higher than g's (*fence.StaleError:
// a newer holder wrote or deleted it; whatever this one computes is stale). It returns
// fence.ErrInvalidArgument for a nil in, an empty Bucket or Key or a typed-nil g,
// and fence.CheckGrant's errors, before any request, and ErrBadMetadata for
// unreadable token metadata. Other failures wrap the client's error.
func (s *Store) Get(ctx context.Context, g fence.Grant, in *s3.GetObjectInput) (*Object, error) {
	if g != nil {
		if err := checkGrant(g); err != nil {
			return nil, err
		}
		if err := fence.CheckLost(g); err != nil {
			return nil, err
		}
	}
	obj, st, err := s.get(ctx, in)
	if err != nil {
		return nil, err
	}
	switch {
	case g != nil && st.Token > g.Token():
		obj.Body.Close()
		return nil, stale(g, st.Token)
	case st.tombstone:
		obj.Body.Close()
		return nil, notFound(aws.ToString(in.Bucket), aws.ToString(in.Key), st.Token)
	}
	return obj, nil
}

// Head returns the version stored at bucket/key with one HEAD: fence.ErrNotFound
// when there is none or it was deleted (a HEAD cannot tell a missing bucket from a
// missing key), fence.ErrInvalidArgument for an empty bucket or key before any
// request, ErrBadMetadata for unreadable token metadata, and otherwise the client's
// error, wrapped.
func (s *Store) Head(ctx context.Context, bucket, key string) (Version, error) {
	if err := checkObject(s, bucket, key); err != nil {
		return Version{}, err
	}
	st, err := s.head(ctx, bucket, key)
	switch {
	case err != nil:
		return Version{}, err
	case !st.exists || st.tombstone:
		return Version{}, notFound(bucket, key, st.Token)
	}
	return st.Version, nil
}

func (s *Store) get(ctx context.Context, in *s3.GetObjectInput) (*Object, state, error) {
	if in == nil {
		return nil, state{}, invalid("nil GetObjectInput")
	}
	bucket, key := aws.ToString(in.Bucket), aws.ToString(in.Key)
	if err := checkObject(s, bucket, key); err != nil {
		return nil, state{}, err
	}
	out, err := s.api.GetObject(ctx, in)
	if err != nil {
		if getNotFound(err) {
			return nil, state{}, notFound(bucket, key, 0)
		}
		return nil, state{}, fmt.Errorf("s3fence: get %s/%s: %w", bucket, key, err)
	}
	st, err := readState(bucket, key, out.ETag, out.Metadata)
	if err != nil {
		out.Body.Close()
		return nil, state{}, err
	}
	return &Object{Body: out.Body, Version: st.Version, Output: out}, st, nil
}
