package s3fence

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/fence"
)

// Put stores the object in describes for grant g: a HEAD reads the stored token and
// ETag, a token above g's is refused with a *fence.StaleError, and the PUT carries
// g's token, conditioned on that ETag (or on absence); a lost race reads and decides
// again, up to the Store's attempt limit, then ErrContended. The package doc tells
// the story; PutIfMatch skips the HEAD.
//
// Body must be nil or an io.Seeker; in is not modified. Before any request it returns
// fence.ErrInvalidArgument for a nil in, an empty Bucket or Key, a body that cannot
// seek, IfMatch or IfNoneMatch set, reserved metadata or a fence.Set of several, and
// fence.CheckGrant's errors; fence.ErrLost once a Watched grant's lock is lost;
// ErrBadMetadata for an unreadable stored token (the object left alone).
func (s *Store) Put(ctx context.Context, g fence.Grant, in *s3.PutObjectInput) (Version, error) {
	body, err := s.checkPut(g, in)
	if err != nil {
		return Version{}, err
	}
	bucket, key := aws.ToString(in.Bucket), aws.ToString(in.Key)
	return s.write(ctx, g, bucket, key, func(st state) (*s3.PutObjectInput, error) {
		return fencedInput(in, body, g, st)
	})
}

// PutIfMatch stores the object like Put, without reading it first: prev is the
// version the caller already holds, from Get, Head or an earlier Put, and the PUT is
// conditioned on its ETag. It costs exactly one request, as a plain PutObject does.
// A prev whose token is higher than g's is refused with a *fence.StaleError before
// any request, and a prev without an ETag with fence.ErrInvalidArgument. When the
// object is no longer prev, PutIfMatch does not retry, since whatever the caller
// computed from prev may be out of date: it reads the object once more and returns
// a *fence.StaleError when a higher token is stored, or ErrChanged (read it again).
// Other errors are Put's.
func (s *Store) PutIfMatch(ctx context.Context, g fence.Grant, in *s3.PutObjectInput, prev Version) (Version, error) {
	body, err := s.checkPut(g, in)
	if err != nil {
		return Version{}, err
	}
	if prev.ETag == "" {
		return Version{}, invalid("PutIfMatch needs the ETag of the version read")
	}
	if prev.Token > g.Token() {
		return Version{}, stale(g, prev.Token)
	}
	bucket, key := aws.ToString(in.Bucket), aws.ToString(in.Key)
	put, err := fencedInput(in, body, g, state{Version: prev, exists: true})
	if err != nil {
		return Version{}, err
	}
	v, err := s.putOnce(ctx, g, bucket, key, put)
	if err == nil || !conditionFailed(err) {
		return v, err
	}
	if err := fence.CheckLost(g); err != nil {
		return Version{}, err
	}
	st, herr := s.head(ctx, bucket, key)
	switch {
	case herr != nil:
		return Version{}, herr
	case st.Token > g.Token():
		return Version{}, stale(g, st.Token)
	}
	return Version{}, fmt.Errorf("%w: %s/%s is now %s (token %d), not %s", ErrChanged, bucket, key, st.ETag, st.Token, prev.ETag)
}

// write is the read, decide, conditional PUT loop shared by Put and Delete. build
// makes the conditional PUT for the state read, or returns a nil input when that
// state already is what the write wants (nothing to store).
func (s *Store) write(ctx context.Context, g fence.Grant, bucket, key string, build func(state) (*s3.PutObjectInput, error)) (Version, error) {
	for attempt := 1; ; attempt++ {
		if err := fence.CheckLost(g); err != nil {
			return Version{}, err
		}
		st, err := s.head(ctx, bucket, key)
		if err != nil {
			return Version{}, err
		}
		if st.Token > g.Token() {
			return Version{}, stale(g, st.Token)
		}
		put, err := build(st)
		if err != nil || put == nil {
			return st.Version, err
		}
		v, err := s.putOnce(ctx, g, bucket, key, put)
		if err == nil || !conditionFailed(err) {
			return v, err
		}
		if attempt >= s.maxAttempts {
			return Version{}, fmt.Errorf("%w: %s/%s: %d conditional PUTs lost to other writers", ErrContended, bucket, key, attempt)
		}
	}
}

// putOnce sends one conditional PUT. A condition that fails is returned as the
// client's error, for the caller to tell apart.
func (s *Store) putOnce(ctx context.Context, g fence.Grant, bucket, key string, put *s3.PutObjectInput) (Version, error) {
	if err := fence.CheckLost(g); err != nil {
		return Version{}, err
	}
	out, err := s.api.PutObject(ctx, put)
	if err != nil {
		if conditionFailed(err) {
			return Version{}, err
		}
		return Version{}, fmt.Errorf("s3fence: put %s/%s: %w", bucket, key, err)
	}
	return Version{ETag: aws.ToString(out.ETag), Token: g.Token()}, nil
}

// rewindable is the body of a PUT that can be sent again.
type rewindable struct {
	r     io.ReadSeeker
	start int64
}

// fencedInput copies in, with the token metadata and the condition on st, and
// its body rewound to where it stood.
func fencedInput(in *s3.PutObjectInput, body *rewindable, g fence.Grant, st state) (*s3.PutObjectInput, error) {
	put := *in
	put.Metadata = maps.Clone(in.Metadata)
	if put.Metadata == nil {
		put.Metadata = make(map[string]string, 1)
	}
	put.Metadata[TokenKey] = strconv.FormatInt(int64(g.Token()), 10)
	st.condition(&put)
	if body != nil {
		if _, err := body.r.Seek(body.start, io.SeekStart); err != nil {
			return nil, fmt.Errorf("s3fence: rewind body: %w", err)
		}
		put.Body = body.r
	}
	return &put, nil
}

// checkPut refuses what Put and PutIfMatch cannot write, before any request, and
// returns the body's start.
func (s *Store) checkPut(g fence.Grant, in *s3.PutObjectInput) (*rewindable, error) {
	if err := checkGrant(g); err != nil {
		return nil, err
	}
	if in == nil {
		return nil, invalid("nil PutObjectInput")
	}
	if err := checkObject(s, aws.ToString(in.Bucket), aws.ToString(in.Key)); err != nil {
		return nil, err
	}
	if in.IfMatch != nil || in.IfNoneMatch != nil {
		return nil, invalid("IfMatch and IfNoneMatch are set by the Store; use PutIfMatch to write over a version read")
	}
	for k := range in.Metadata {
		if strings.EqualFold(k, TokenKey) || strings.EqualFold(k, TombstoneKey) {
			return nil, invalid("metadata key %q is reserved", k)
		}
	}
	if in.Body == nil {
		return nil, nil
	}
	if isNil(in.Body) {
		return nil, invalid("body is a nil %T", in.Body)
	}
	rs, ok := in.Body.(io.ReadSeeker)
	if !ok {
		return nil, invalid("body %T cannot seek: a PUT retried after a 412 must send the same bytes (use bytes.Reader, strings.Reader or *os.File)", in.Body)
	}
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, invalid("body cannot seek: %v", err)
	}
	return &rewindable{r: rs, start: start}, nil
}

// tombstoneBody is the content of the marker Delete leaves. It names the token so
// that every deletion by a new token has an ETag of its own.
func tombstoneBody(t fence.Token) []byte {
	return fmt.Appendf(nil, "deleted by fencegate s3fence with fencing token %d\n", t)
}

// Delete deletes the object at bucket/key for grant g, so that no writer with a
// lower token can bring it back: it replaces the object (or the absence of one) by a
// small tombstone object carrying g's token, with the same read, decide and
// conditional PUT as Put. Head and Get of a tombstoned key return
// fence.ErrNotFound; a Put with a token at least g's writes over it. Readers that do
// not go through this package see the tombstone as an object of a few bytes with
// the metadata fence-tombstone: true. Deleting a key already deleted with g's token
// sends no PUT. Errors are Put's.
func (s *Store) Delete(ctx context.Context, g fence.Grant, bucket, key string) error {
	if err := checkGrant(g); err != nil {
		return err
	}
	if err := checkObject(s, bucket, key); err != nil {
		return err
	}
	_, err := s.write(ctx, g, bucket, key, func(st state) (*s3.PutObjectInput, error) {
		if st.tombstone && st.Token == g.Token() {
			return nil, nil
		}
		put := &s3.PutObjectInput{
			Bucket:      aws.String(bucket),
			Key:         aws.String(key),
			Body:        bytes.NewReader(tombstoneBody(g.Token())),
			ContentType: aws.String("text/plain; charset=utf-8"),
			Metadata:    map[string]string{TokenKey: strconv.FormatInt(int64(g.Token()), 10), TombstoneKey: "true"},
		}
		st.condition(put)
		return put, nil
	})
	return err
}
