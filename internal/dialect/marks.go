package dialect

import (
	"github.com/fencegate/fencegate/internal/mysqlsql"
	"github.com/fencegate/fencegate/internal/pgsql"
	"github.com/fencegate/fencegate/internal/sqlitesql"
)

// Marks are a dialect's statements on the stored marks for the operator's tools
// (fencemark, fencectl), taken from the dialect's own package (pgsql, mysqlsql,
// sqlitesql), where the adapters' raise is written too.
type Marks struct {
	Read     string // a resource's mark; argument: the resource
	Lock     string // Read, its row locked to commit
	Raise    string // raise a mark unless as high, never refusing; arguments: resource, token
	RaiseAll string // raise every mark below the token; arguments: the token RaiseAllArgs times
	List     string // every mark: resource, token, updated_at, by resource
	ListOne  string // List for one resource; argument: the resource

	RaiseAllArgs int
}

// MarksOf returns d's Marks; false for none of the dialects.
func MarksOf(d Dialect) (Marks, bool) {
	switch d {
	case Postgres:
		return Marks{pgsql.MarkSQL, pgsql.MarkLockSQL, pgsql.MarkRaiseSQL, pgsql.RaiseAllSQL, pgsql.ListSQL, pgsql.ListOneSQL, 1}, true
	case MySQL:
		return Marks{mysqlsql.MarkSQL, mysqlsql.MarkLockSQL, mysqlsql.MarkRaiseSQL, mysqlsql.RaiseAllSQL,
			mysqlsql.ListSQL, mysqlsql.ListOneSQL, 2}, true
	case SQLite:
		return Marks{sqlitesql.MarkSQL, sqlitesql.MarkSQL, sqlitesql.MarkRaiseSQL, sqlitesql.RaiseAllSQL,
			sqlitesql.ListSQL, sqlitesql.ListOneSQL, 2}, true
	}
	return Marks{}, false
}
