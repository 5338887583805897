// Command fencegate-migrate writes the migration that adds a fencing token column to
// an application's table, and applies or rolls back fencegate's own tables.
//
//	fencegate-migrate gen  -dir db/migrations -table invoices -dialect postgres
//	fencegate-migrate up   -dialect postgres -dsn postgres://app@localhost/app
//	fencegate-migrate down -dialect sqlite   -dsn app.db
//
// gen prints the two files it wrote; it never overwrites one. up and down use the
// library's own migrations table, fencegate_schema_migrations. DSNs are those of the
// Go drivers: a postgres:// URL (pgx), a go-sql-driver/mysql DSN, a SQLite file name
// (modernc.org/sqlite). Exit status: 0 done, 1 failed, 2 bad usage.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fencegate/fencegate/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  fencegate-migrate gen  -dir DIR -table TABLE -dialect postgres|mysql|sqlite
  fencegate-migrate up   -dialect postgres|mysql|sqlite -dsn DSN
  fencegate-migrate down -dialect postgres|mysql|sqlite -dsn DSN
`

var errUsage = errors.New("bad usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "fencegate-migrate: %v\n", err)
		}
		fmt.Fprint(stderr, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "fencegate-migrate: %v\n", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	fs := flag.NewFlagSet("fencegate-migrate "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dialect := fs.String("dialect", "", "postgres, mysql or sqlite")
	switch args[0] {
	case "gen":
		dir := fs.String("dir", "", "the application's golang-migrate folder")
		table := fs.String("table", "", "the table to add fence_token to, optionally schema.table")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		if *dir == "" || *table == "" {
			return fmt.Errorf("%w: gen needs -dir and -table", errUsage)
		}
		d, err := parseDialect(*dialect)
		if err != nil {
			return err
		}
		g, err := migrations.GenerateTokenColumn(*dir, *table, d)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n%s\n", g.Up, g.Down)
		return nil
	case "up", "down":
		dsn := fs.String("dsn", "", "the database to migrate")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		if *dsn == "" {
			return fmt.Errorf("%w: %s needs -dsn", errUsage, args[0])
		}
		d, err := parseDialect(*dialect)
		if err != nil {
			return err
		}
		db, err := sql.Open(driverName(d), *dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		if args[0] == "up" {
			return migrations.Up(ctx, db, d)
		}
		return migrations.Down(ctx, db, d)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

func parseDialect(s string) (migrations.Dialect, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: -dialect is required", errUsage)
	}
	d, err := migrations.ParseDialect(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errUsage, err)
	}
	return d, nil
}

func driverName(d migrations.Dialect) string {
	switch d {
	case migrations.Postgres:
		return "pgx"
	case migrations.MySQL:
		return "mysql"
	}
	return "sqlite"
}
