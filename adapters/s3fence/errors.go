package s3fence

import (
	"errors"
	"fmt"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/fence"
)

// Errors of this package. Refusals use fence's: a *fence.StaleError (fence.ErrStale)
// for a lower token than the object's, fence.ErrLost for a
// Watched grant whose lock is lost, fence.ErrNotFound for an object that is absent or
// deleted, and fence.ErrInvalidArgument, naming the problem, for bad input (a bad
// grant, resource or token included), all but ErrNotFound before any request.
var (
	// ErrContended means every attempt of a write lost its conditional PUT to a
	// concurrent writer (HTTP 412 each time) until the Store's attempt limit. Nothing
	// of this write was stored; the object holds another writer's version.
	ErrContended = errors.New("s3fence: object kept changing under a conditional write")
	// ErrChanged means PutIfMatch's condition failed: the object is no longer the
	// version the caller read, though its token is not higher than the grant's (the
	// same holder or an older one wrote since). Nothing was stored; read it again.
	ErrChanged = errors.New("s3fence: object changed since it was read")
	// ErrBadMetadata means an object's fence-token metadata is not a positive decimal
	// integer. The object is not overwritten: its token cannot be compared.
	ErrBadMetadata = errors.New("s3fence: unreadable fence token metadata")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: s3fence: %s", fence.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// statusOf returns the HTTP status of a failed request, or 0.
func statusOf(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// conditionFailed reports whether a conditional PUT lost: 412 Precondition Failed,
// or 409 ConditionalRequestConflict, which S3 returns when another conditional
// write to the key is in flight.
func conditionFailed(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return true
		}
	}
	return statusOf(err) == http.StatusPreconditionFailed
}

// headNotFound reports whether a HEAD found no object (a HEAD response has no body,
// so a missing bucket looks the same).
func headNotFound(err error) bool {
	var nf *types.NotFound
	return errors.As(err, &nf) || statusOf(err) == http.StatusNotFound
}

// getNotFound reports whether a GET found no such key.
func getNotFound(err error) bool {
	var nk *types.NoSuchKey
	return errors.As(err, &nk)
}

func notFound(bucket, key string, deleted fence.Token) error {
	if deleted > 0 {
		return fmt.Errorf("%w: s3fence: %s/%s was deleted with token %d", fence.ErrNotFound, bucket, key, deleted)
	}
	return fmt.Errorf("%w: s3fence: no object %s/%s", fence.ErrNotFound, bucket, key)
}
