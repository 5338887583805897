package mysql_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
)

func TestOpen_badDSN(t *testing.T) {
	db, err := mysql.Open("user@tcp(127.0.0.1:3306/db")
	if !errors.Is(err, fence.ErrInvalidArgument) || db != nil {
		t.Fatalf("Open() = %v, %v; want ErrInvalidArgument and no pool", db, err)
	}
}

// TestOpen_unsafeCollation keeps a DSN whose collation the driver will not
// interpolate into usable, without interpolation.
func TestOpen_unsafeCollation(t *testing.T) {
	db, err := mysql.Open("u:p@tcp(127.0.0.1:3306)/db?collation=sjis_japanese_ci")
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	db.Close()
}
