package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

const resource = "nightly-report"

// manifest is the report's commit point: written last, it names the data parts
// readers should read. A part no manifest names is never read.
type manifest struct {
	WrittenBy string   `json:"written_by"`
	Token     int64    `json:"token"`
	Parts     []string `json:"parts"`
}

type timeline struct {
	out     io.Writer
	start   time.Time
	store   *s3fence.Store
	client  *s3.Client
	bucket  string
	lease   time.Duration
	noFence bool
}

// result is what the run showed.
type result struct {
	t1, t2   fence.Token
	lost     error    // holder 1's write presenting its lock, after waking (fenced runs)
	stale    error    // holder 1's manifest write presenting its bare token
	read     manifest // the manifest as a reader finds it
	partBody string   // the first part it names
}

func (tl *timeline) log(format string, args ...any) {
	fmt.Fprintf(tl.out, "%5.1f s  %s\n", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...))
}

// play runs the timeline: holder 1 takes the lock and stalls past its lease,
// holder 2 takes it and writes its report, holder 1 wakes and writes its own.
func (tl *timeline) play(ctx context.Context, h1, h2 *lockclient.Client) (*result, error) {
	prefix := "reports/" + time.Now().UTC().Format("2006-01-02") + "/"
	// Demo only: each run may start a fresh etcd whose tokens begin again at 2, and a
	// manifest stored by an earlier run with a higher token would rightly refuse them.
	if _, err := tl.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(tl.bucket), Key: aws.String(prefix + "manifest.json")}); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	lock1, err := h1.Acquire(ctx, resource, lockclient.WithManualRenewal(tl.lease))
	if err != nil {
		return nil, err
	}
	res := &result{t1: lock1.Token()}
	tl.log("holder 1 takes %s: token %d, lease %v, renewed by hand", resource, lock1.Token(), tl.lease)
	tl.log("holder 1 has its report ready; writing it is its next step")
	tl.log("holder 1 stalls: it stops renewing (a GC pause or a frozen VM looks the same to etcd)")
	got := make(chan *lockclient.Lock, 1)
	go func() {
		l, err := h2.Acquire(ctx, resource)
		if err != nil {
			tl.log("holder 2 Acquire: %v", err)
		}
		got <- l
	}()
	<-lock1.Done()
	tl.log("holder 1's lease runs out: its lock client deletes the key and closes Done")
	lock2 := <-got
	if lock2 == nil {
		return nil, errors.New("holder 2 did not get the lock")
	}
	defer lock2.Release(context.WithoutCancel(ctx))
	res.t2 = lock2.Token()
	tl.log("holder 2 takes %s: token %d", resource, lock2.Token())
	if err := tl.writeReport(ctx, "holder 2", lock2, prefix); err != nil {
		return nil, fmt.Errorf("holder 2: %w", err)
	}
	tl.log("holder 2 writes part-%d.csv, then manifest.json naming it: accepted", lock2.Token())

	if !tl.noFence {
		// Holder 1 wakes. Presenting its lock, it is refused before any request.
		res.lost = tl.writeReport(ctx, "holder 1", lock1, prefix)
		tl.log("holder 1 wakes and writes presenting its lock: %v", errText(res.lost))
	}
	// A holder can as well wake and write before its client notices the loss: the
	// bare token stands for it, and the store is the last line of defence.
	res.stale = tl.writeReport(ctx, "holder 1", fence.NewGrant(resource, lock1.Token()), prefix)
	switch {
	case tl.noFence:
		tl.log("holder 1 wakes and writes part-%d.csv and manifest.json with plain PutObjects: %v", lock1.Token(), errText(res.stale))
	default:
		tl.log("holder 1 writes with its bare token %d: part-%d.csv lands under a fresh key (no manifest will name it); manifest.json: %v", lock1.Token(), lock1.Token(), errText(res.stale))
	}
	return res, tl.readReport(ctx, prefix, res)
}

// writeReport writes one data part under a key of its own, then the manifest
// naming it, last: the manifest is the commit point. With -no-fence both are plain
// PutObjects.
func (tl *timeline) writeReport(ctx context.Context, who string, g fence.Grant, prefix string) error {
	part := fmt.Sprintf("%spart-%d.csv", prefix, g.Token())
	m, err := json.Marshal(manifest{WrittenBy: who, Token: int64(g.Token()), Parts: []string{part}})
	if err != nil {
		return err
	}
	objects := []struct {
		key  string
		body []byte
	}{
		{part, fmt.Appendf(nil, "account,total\n42,%d\n# by %s, token %d\n", 100+g.Token(), who, g.Token())},
		{prefix + "manifest.json", m},
	}
	for _, o := range objects {
		in := &s3.PutObjectInput{Bucket: aws.String(tl.bucket), Key: aws.String(o.key), Body: bytes.NewReader(o.body)}
		if tl.noFence {
			_, err = tl.client.PutObject(ctx, in)
		} else {
			_, err = tl.store.Put(ctx, g, in)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readReport reads the report as a reader does: the manifest, then the parts it
// names.
func (tl *timeline) readReport(ctx context.Context, prefix string, res *result) error {
	read := func(key string) ([]byte, error) {
		obj, err := tl.store.Get(ctx, nil, &s3.GetObjectInput{Bucket: aws.String(tl.bucket), Key: aws.String(key)})
		if err != nil {
			return nil, err
		}
		defer obj.Body.Close()
		return io.ReadAll(obj.Body)
	}
	b, err := read(prefix + "manifest.json")
	if err != nil {
		return fmt.Errorf("reader: %w", err)
	}
	if err := json.Unmarshal(b, &res.read); err != nil || len(res.read.Parts) == 0 {
		return fmt.Errorf("reader: manifest %q: %v", b, err)
	}
	part, err := read(res.read.Parts[0])
	if err != nil {
		return fmt.Errorf("reader: %w", err)
	}
	res.partBody = string(part)
	fmt.Fprintf(tl.out, "\nA reader finds manifest.json written by %s (token %d), naming %s:\n%s", res.read.WrittenBy, res.read.Token, res.read.Parts[0], res.partBody)
	return nil
}

func errText(err error) string {
	if err == nil {
		return "accepted"
	}
	return "refused: " + err.Error()
}

// verdict checks that the run showed what it claims, and says so.
func (r *result) verdict(out io.Writer, noFence bool) error {
	if r.t2 <= r.t1 {
		return fmt.Errorf("holder 2's token %d is not above holder 1's %d", r.t2, r.t1)
	}
	if noFence {
		if r.stale != nil || r.read.Token != int64(r.t1) {
			return fmt.Errorf("without fencing the stale report should have replaced the new one; stale write: %v, manifest token %d", r.stale, r.read.Token)
		}
		fmt.Fprintf(out, "\nWithout fencing, holder 1's stale report (token %d) replaced holder 2's (token %d).\n", r.t1, r.t2)
		return nil
	}
	if !errors.Is(r.lost, fence.ErrLost) {
		return fmt.Errorf("holder 1's write presenting its lost lock returned %v, want fence.ErrLost", r.lost)
	}
	var se *fence.StaleError
	if !errors.As(r.stale, &se) || se.Seen != r.t2 || se.Presented != r.t1 {
		return fmt.Errorf("holder 1's manifest write returned %v, want a *fence.StaleError %d < %d", r.stale, r.t1, r.t2)
	}
	if r.read.Token != int64(r.t2) {
		return fmt.Errorf("the reader found the manifest of token %d, want holder 2's %d", r.read.Token, r.t2)
	}
	fmt.Fprintf(out, "\nThe store refused holder 1's manifest (token %d presented, %d already seen: fence.ErrStale);\nholder 2's report stands. Holder 1's part is an orphan no manifest names.\n", r.t1, r.t2)
	return nil
}
