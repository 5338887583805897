package s3fence

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/fence"
)

// API is the part of *s3.Client a Store uses.
type API interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// Metadata keys the Store writes on every object (S3 sends them as the headers
// x-amz-meta-fence-token and x-amz-meta-fence-tombstone). Both are reserved: a
// PutObjectInput that sets either is refused.
const (
	// TokenKey holds the token of the grant that wrote the object, in decimal.
	TokenKey = "fence-token"
	// TombstoneKey is "true" on the marker Delete leaves in place of an object.
	TombstoneKey = "fence-tombstone"
)

// defaultMaxAttempts is how many conditional PUTs one write tries unless
// WithMaxAttempts says otherwise.
const defaultMaxAttempts = 10

// Store makes fenced writes to objects through an S3 client. It is safe for
// concurrent use and holds no state besides its settings.
type Store struct {
	api         API
	maxAttempts int
}

// Option configures a Store.
type Option func(*Store) error

// WithMaxAttempts bounds the conditional PUTs of one write (1 to 100): each one
// that fails with 412, because another writer changed the object between this
// write's read and its PUT, is followed by a fresh read and decision, until n
// attempts have failed and the write returns ErrContended. The default is 10.
func WithMaxAttempts(n int) Option {
	return func(s *Store) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("s3fence: WithMaxAttempts(%d): want 1 to 100: %w", n, fence.ErrInvalidArgument)
		}
		s.maxAttempts = n
		return nil
	}
}

// New returns a Store writing through api, normally an *s3.Client for any
// S3-compatible endpoint that honours If-Match and If-None-Match on PutObject.
// It returns an error wrapping fence.ErrInvalidArgument, and a nil Store, for a nil
// api (a typed nil too) and an unusable option (the error names it). A nil Option is
// ignored.
func New(api API, opts ...Option) (*Store, error) {
	if isNil(api) {
		return nil, invalid("nil S3 client")
	}
	s := &Store{api: api, maxAttempts: defaultMaxAttempts}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Version identifies what a fenced write or read saw: the object's ETag and the
// token stored with it (0 for an object written without this package).
type Version struct {
	ETag  string
	Token fence.Token
}

// state is what a read found at a key.
type state struct {
	Version
	exists    bool // an object or a tombstone is stored
	tombstone bool
}

// condition sets in's precondition to "still the version read": If-Match on its
// ETag, or If-None-Match: * when nothing was stored.
func (st state) condition(in *s3.PutObjectInput) {
	if st.exists {
		in.IfMatch = aws.String(st.ETag)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
}

// readState parses the fence metadata of a stored object.
func readState(bucket, key string, etag *string, meta map[string]string) (state, error) {
	st := state{Version: Version{ETag: aws.ToString(etag)}, exists: true}
	for k, v := range meta {
		switch strings.ToLower(k) {
		case TokenKey:
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n <= 0 {
				return state{}, fmt.Errorf("%w: %s/%s has %s %q", ErrBadMetadata, bucket, key, TokenKey, v)
			}
			st.Token = fence.Token(n)
		case TombstoneKey:
			st.tombstone = v == "true"
		}
	}
	return st, nil
}

// head reads the version stored at bucket/key; a missing object is a state that
// does not exist.
func (s *Store) head(ctx context.Context, bucket, key string) (state, error) {
	out, err := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if headNotFound(err) {
			return state{}, nil
		}
		return state{}, fmt.Errorf("s3fence: head %s/%s: %w", bucket, key, err)
	}
	return readState(bucket, key, out.ETag, out.Metadata)
}

// checkGrant refuses what fence.CheckGrant refuses, and a grant set of several
// resources: an object keeps one token, and a set's token says nothing about which
// of its resources an object belongs to. A set of one is that resource's grant.
func checkGrant(g fence.Grant) error {
	if isNil(g) {
		return invalid("nil grant")
	}
	return checkSingle(g)
}

func checkObject(s *Store, bucket, key string) error {
	switch {
	case s == nil || isNil(s.api):
		return invalid("nil Store; use New")
	case bucket == "":
		return invalid("empty bucket")
	case key == "":
		return invalid("empty key")
	}
	return nil
}

func stale(g fence.Grant, seen fence.Token) error {
	return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
}
