//go:build e2e

package e2e

import "testing"

// TestImages builds the suite's images (or finds them, by the hash of their inputs)
// and checks that each can be found by the exact tag the suite runs: dockertest
// would try to pull any other, and there is no registry. On its own,
// `(cd e2e && go test -tags e2e -run TestImages .)` is the image-building command.
func TestImages(t *testing.T) {
	pool, im := suite(t)
	for _, ref := range []string{im.Etcd, im.Postgres, im.Worker} {
		img, err := pool.Client.InspectImage(ref)
		if err != nil {
			t.Fatalf("image %s: %v", ref, err)
		}
		t.Logf("%s: %d MB", ref, img.Size>>20)
	}
}
