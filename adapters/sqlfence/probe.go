package sqlfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
)

// errFoundRows is the refusal of a MySQL pool that counts changed rows instead of
// matched rows, so a fenced write of unchanged values would look refused.
var errFoundRows = fmt.Errorf("%w: sqlfence: the mysql connection lacks clientFoundRows=true", fence.ErrInvalidArgument)

// probeResource is a fence row name no grant can present (fence refuses NUL bytes).
const probeResource = "\x00sqlfence:clientFoundRows probe"

// probeFoundRows checks once per Store that the MySQL pool reports matched rows: in
// a transaction that is always rolled back it writes the probe row and then writes it
// again unchanged, which reports 1 row with clientFoundRows and 0 without. A verdict
// is kept; an error that is not a verdict (ctx ended, network) is returned and the
// check runs again next time.
func (s *Store) probeFoundRows(ctx context.Context) error {
	if s.probeOK.Load() {
		return nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeE
	}
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		defer tx.Rollback()
		const q = "INSERT INTO fence_tokens (resource, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token"
		var n int64
		for range 2 {
			res, err := tx.ExecContext(ctx, q, probeResource)
			if missingSchema(err) {
				return fmt.Errorf("%w: check mysql connection: %w", fence.ErrSchema, err)
			}
			if err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
			if n, err = res.RowsAffected(); err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
		}
		var version string
		if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
		if n == 0 {
			return fmt.Errorf("%w: rows changed are counted instead of rows matched, so a valid "+
				"write of unchanged values would look refused; add clientFoundRows=true to the DSN "+
				"(user:pass@tcp(host:3306)/db?clientFoundRows=true&interpolateParams=true) or open "+
				"the pool with sqlfence/mysql's Open", errFoundRows)
		}
		return nil
	})
	if err == nil || errors.Is(err, errFoundRows) {
		s.probed, s.probeE = true, err
		s.probeOK.Store(err == nil)
	}
	return err
}
