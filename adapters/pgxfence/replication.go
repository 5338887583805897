package pgxfence

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// notReplicatedKey marks, in a connection's CustomData, the notice of a COMMIT whose
// wait for a synchronous standby was cancelled.
const notReplicatedKey = "fencegate.notReplicated"

// WatchReplication makes connections made from cfg report what a Store cannot see
// otherwise: PostgreSQL's WARNING that a COMMIT's wait for a synchronous standby was
// cancelled by a cancel request (pg_cancel_backend, or a client's) and the transaction
// committed locally only. Fenced on such a connection then returns an error that
// errors.Is fence.ErrNotReplicated, never nil. cfg's own OnNotice still runs. Set it
// on the pool's config before the pool connects:
//
//	cfg, _ := pgxpool.ParseConfig(dsn)
//	pgxfence.WatchReplication(cfg.ConnConfig)
//
// statement_timeout never ends the wait; a ctx that ends makes pgx close the connection
// (Fenced: fence.ErrCommitUnknown; the write may still land): list several standbys
// (synchronous_standby_names = 'ANY 1 (a, b)'); README, "Replicas and failover". The
// warning is read by its English text (lc_messages C or en). Single-row writes commit
// on their own and cannot be told: where replication must be confirmed, use Fenced.
func WatchReplication(cfg *pgx.ConnConfig) {
	if cfg == nil {
		return
	}
	next := cfg.OnNotice
	cfg.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "wait for synchronous replication") {
			c.CustomData()[notReplicatedKey] = n.Message
		}
		if next != nil {
			next(c, n)
		}
	}
}

// forgetReplication clears a warning left on conn by an earlier statement, before a
// fenced transaction begins on it.
func forgetReplication(conn *pgx.Conn) {
	if d := conn.PgConn().CustomData(); len(d) > 0 {
		delete(d, notReplicatedKey)
	}
}

// replicationErr is fence.ErrNotReplicated if conn got the warning since
// forgetReplication, else nil.
func replicationErr(conn *pgx.Conn, g *grant.Checked) error {
	d := conn.PgConn().CustomData()
	if len(d) == 0 {
		return nil
	}
	msg, ok := d[notReplicatedKey]
	if !ok {
		return nil
	}
	delete(d, notReplicatedKey)
	return fmt.Errorf("%w: pgxfence: fenced transaction for %q at token %d committed on the primary only: %v",
		fence.ErrNotReplicated, g.Resource(), g.Token(), msg)
}
