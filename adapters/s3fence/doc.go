// Package s3fence fences object writes to S3 and S3-compatible stores with a lock's
// fencing token, so that a holder frozen past its lease cannot PUT its stale object
// over the one its successor wrote.
//
// Every object written through a Store carries the token of the grant that wrote
// it in its metadata (x-amz-meta-fence-token). A fenced Put reads the stored token
// and ETag (one HEAD), refuses a lower token than the stored one with a
// *fence.StaleError, and otherwise PUTs conditioned on the ETag it read (If-Match),
// or on the key being absent (If-None-Match: *). A PUT whose condition fails (412:
// someone wrote in between) is read and decided again, a bounded number of times.
// Every accepted write is thus a compare-and-swap on the object whose token was
// checked:
//
//	store, err := s3fence.New(s3Client)
//	...
//	lock, err := locks.Acquire(ctx, "nightly-report")
//	...
//	_, err = store.Put(ctx, lock, &s3.PutObjectInput{
//		Bucket: aws.String("reports"),
//		Key:    aws.String("2026-12-01.csv"),
//		Body:   bytes.NewReader(report),
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop, do not retry */ }
//
// # What it costs
//
// A fenced Put is two requests where a plain PutObject is one: a HEAD, then the
// conditional PUT (plus one HEAD and PUT per lost race, at most the Store's attempt
// limit). PutIfMatch skips the HEAD when the caller already holds the version (from
// Get, Head or its own previous Put): one request, exactly a plain PUT's.
//
// # Deletes
//
// A plain DELETE would erase the key's memory of its token, and a stale holder's PUT
// (If-None-Match: * on an absent key) would bring the object back. Delete instead
// leaves a tombstone: a small object with the deleting token and the metadata
// fence-tombstone: true. Head and Get treat it as fence.ErrNotFound (Get under a
// grant older than the delete's returns a *fence.StaleError instead), and only a
// Put with a token at least as high writes over it. Readers that do not go through
// this package see the tombstone as a small object; list keys through the package's
// readers, or filter on that metadata, where that matters.
//
// # Several objects
//
// S3 has no transaction across objects: each object is fenced on its own. A holder
// that writes several objects and is cut off halfway (refused, lost, crashed) leaves
// the ones it wrote behind, each consistent with its own token. Make one object the
// commit point and write it last: data objects under fresh keys (named after the
// token, say), then a manifest naming them, through Put. Readers read the manifest
// first and only the objects it names. A stale holder's data objects are never
// named, because its manifest Put is refused; a successor's manifest names only its
// own.
//
// # What the ETag is
//
// S3's ETag is a hash of the object's bytes, not a version number: two writes of the
// same bytes have the same ETag, whatever their metadata says. A stale holder whose
// HEAD saw bytes B can therefore win its conditional PUT if, between that HEAD and
// its PUT, newer holders wrote B back byte for byte (an A-B-A). Reports, snapshots
// and manifests that carry a date, a token or a write id never recur; an object
// whose content can come back (a flag, a status word) should carry the token or a
// write id in its bytes to be fenced without that window. Tombstones carry their
// token for this reason.
//
// # Errors
//
// Refusals are fence's: *fence.StaleError (fence.ErrStale) with the token seen,
// fence.ErrLost for a fence.Watched grant (such as a
// *lockclient.Lock) whose lock is lost, checked before every request,
// fence.ErrNotFound, and fence.ErrInvalidArgument, naming the problem, for bad
// input (a bad grant, resource or token included) before any request. A grant
// over several resources (fence.Set) is refused: an object keeps one token.
package s3fence
