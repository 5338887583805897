//go:build e2e

// Package e2e is fencegate's end-to-end fault suite: a 3-member etcd cluster,
// PostgreSQL 15 (or MariaDB 10.11) and billing workers (examples/billing) run as
// Docker containers, and the tests freeze, kill and cut them off while the workers
// do fenced read-modify-write jobs. The scenario kit's history checker
// (scenario.History.Check; history.go makes the history) then holds the database to
// what the workers logged: no acknowledged write lost, committed tokens per account
// never going down, no token granted to two holders. The same runs with fencing
// turned off must break those guarantees, and the checker must say so.
//
// The database fails too (TestDatabaseFaults, and inside TestSoak's random
// schedule, on PostgreSQL and on MariaDB): the server SIGKILLed and restarted from
// its data, under load, while a worker is inside a fenced transaction, and while a
// COMMIT waits unread in its socket; the reply to a COMMIT lost; the network between
// the workers and the database cut past a lease, then restored; the server frozen
// (docker pause) past a lease. A write whose COMMIT outcome cannot be known is
// logged as "unknown" (fence.ErrCommitUnknown); the checker accepts either fate for
// it and reads back which one it had, and nothing else.
//
// What is and is not tested for durability. Tested: a server process killed
// (SIGKILL, the container's every process) and restarted from its data directory
// keeps every commit it acknowledged. For that a commit is acknowledged only once
// its log record has been written to the kernel: PostgreSQL runs with
// synchronous_commit = on (off acknowledges before the WAL leaves the server's
// shared memory, and a kill loses such commits); MariaDB with
// innodb_flush_log_at_trx_commit = 2 (the redo log written at every commit,
// flushed to the disk once a second) and no binary log, so sync_binlog does not
// apply. Not tested: power loss or a kernel crash. The log is written but not
// flushed to the disk (PostgreSQL fsync = off; MariaDB's once-a-second flush;
// etcd's --unsafe-no-fsync), which a container kill does not undo because the
// host's page cache survives it, and which power loss would; production needs
// fsync = on (PostgreSQL) and innodb_flush_log_at_trx_commit = 1 (MariaDB) for
// that. The servers also send TCP keepalives every second after 2 s idle, so a
// session whose worker went away while cut off ends within seconds instead of
// holding its row locks for hours.
//
// Run it with ./scripts/e2e, or
//
//	cd e2e && go test -tags e2e -count=1 -v ./...
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
// faults again; README.md gives the soak's run lengths (one round of faults under CI,
// FENCEGATE_E2E_SOAK for a long run).
package e2e
