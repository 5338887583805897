package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	sqldialect "github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/migrations"
)

// openDSN opens the database dsn names: postgres:// or postgresql:// through
// pgx's database/sql driver; a DSN with "@" or "tcp(" or "unix(" as MySQL; else
// a SQLite file (an optional "sqlite:" prefix is dropped), which must exist and
// is opened read-only unless write is set. It returns the driver's name and a
// pool, checked with a ping.
func openDSN(ctx context.Context, dsn string, write bool) (string, *sql.DB, error) {
	var driver, conn string
	switch {
	case dsn == "":
		return "", nil, usageError("no database: -dsn or FENCECTL_DSN")
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if _, err := pgx.ParseConfig(dsn); err != nil {
			return "", nil, usageError(fmt.Sprintf("bad PostgreSQL DSN: %v", err))
		}
		driver, conn = "pgx", dsn
	case strings.Contains(dsn, "@") || strings.Contains(dsn, "tcp(") || strings.Contains(dsn, "unix("):
		if _, err := gomysql.ParseDSN(dsn); err != nil {
			return "", nil, usageError(fmt.Sprintf("bad MySQL DSN (user:password@tcp(host:port)/db): %v", err))
		}
		driver, conn = "mysql", dsn
	default:
		path := strings.TrimPrefix(dsn, "sqlite:")
		if _, err := os.Stat(path); err != nil {
			return "", nil, fmt.Errorf("SQLite database %q: %w (a DSN not starting with postgres:// and without @ or tcp( is read as a SQLite file)", path, err)
		}
		driver, conn = "sqlite", "file:"+path+"?mode=ro"
		if write {
			db, err := sqlite.Open(path) // WAL, a busy timeout, BEGIN IMMEDIATE
			if err != nil {
				return "", nil, fmt.Errorf("open sqlite database: %w", err)
			}
			if err := ping(ctx, driver, db); err != nil {
				return "", nil, err
			}
			return driver, db, nil
		}
	}
	db, err := sql.Open(driver, conn)
	if err != nil {
		return "", nil, fmt.Errorf("open %s database: %w", driver, err)
	}
	if err := ping(ctx, driver, db); err != nil {
		return "", nil, err
	}
	return driver, db, nil
}

// ping checks db, and closes it if it cannot be reached.
func ping(ctx context.Context, driver string, db *sql.DB) error {
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("cannot reach the %s database: %w", driver, err)
	}
	return nil
}

// dialect is the sqlfence dialect of an openDSN driver name.
func dialect(driver string) migrations.Dialect {
	switch driver {
	case "pgx":
		return migrations.Postgres
	case "mysql":
		return migrations.MySQL
	}
	return migrations.SQLite
}

type tokenRow struct {
	Resource  string `json:"resource"`
	Token     int64  `json:"token"`
	UpdatedAt string `json:"updated_at"`
}

func cmdTokens(ctx context.Context, cfg *config, args []string, out io.Writer) error {
	driver, db, err := openDSN(ctx, cfg.dsn, false)
	if err != nil {
		return err
	}
	defer db.Close()
	m, _ := sqldialect.MarksOf(dialect(driver))
	q, qargs := m.List, []any(nil)
	if len(args) == 1 {
		q, qargs = m.ListOne, []any{args[0]}
	}
	rows, err := db.QueryContext(ctx, q, qargs...)
	if err != nil {
		return fmt.Errorf("read fence_tokens (are fencegate's migrations applied?): %w", err)
	}
	defer rows.Close()
	var list []tokenRow
	for rows.Next() {
		var r tokenRow
		var at any
		if err := rows.Scan(&r.Resource, &r.Token, &at); err != nil {
			return fmt.Errorf("read fence_tokens: %w", err)
		}
		switch v := at.(type) {
		case time.Time:
			r.UpdatedAt = v.UTC().Format(time.RFC3339)
		case []byte:
			r.UpdatedAt = string(v)
		default:
			r.UpdatedAt = fmt.Sprint(v)
		}
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read fence_tokens: %w", err)
	}
	if len(args) == 1 && len(list) == 0 {
		return errors.New("no token stored for resource " + fmt.Sprintf("%q", args[0]) + ": no fenced write has reached this database for it")
	}
	if cfg.json {
		if list == nil {
			list = []tokenRow{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tTOKEN\tUPDATED")
	for _, r := range list {
		fmt.Fprintf(tw, "%q\t%d\t%s\n", r.Resource, r.Token, r.UpdatedAt)
	}
	return tw.Flush()
}
