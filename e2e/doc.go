//go:build e2e

// Package e2e is fencegate's end-to-end fault suite: a 3-member etcd cluster,
// PostgreSQL 15 (or MariaDB 10.11) and billing workers (examples/billing) run as
// Docker containers, and the tests freeze, kill and cut them off while the workers
// do fenced read-modify-write jobs. A history checker then holds the database to
// what the workers logged: no acknowledged write lost, committed tokens per account
// never going down, no token granted to two holders. The same runs with fencing
// turned off must break those guarantees, and the checker must say so.
//
// Run it with ./scripts/e2e, or
//
//	go test -tags e2e -count=1 -v ./e2e/...
//
// No image registry is used. The images are built locally on first use and tagged
// with a hash of their inputs, so later runs find them in seconds and a changed input
// builds a new one (see BuildImages): etcd and etcdctl v3.7.3 compiled from the module
// proxy (e2e/images/etcd pins the versions), PostgreSQL and MariaDB each from a
// debootstrapped Debian rootfs (kept as a tarball in the user cache directory, or
// FENCEGATE_E2E_CACHE), and the billing worker, rebuilt each run from the checkout.
// The database images need root and debootstrap the first time.
//
// Every scenario runs its own topology on two private Docker networks, one for etcd
// and one for the database, so a worker can be cut off from etcd alone; every
// container and network is removed by t.Cleanup, and containers left by a test
// process that was killed are removed by the next run. Without a Docker engine the
// tests skip, and fail when CI is set. FENCEGATE_E2E_SEED makes a soak draw the same
// faults again.
package e2e
