package pgxfence

import (
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// QuoteTable exposes the table quoting every builder uses, for the fuzz test.
var QuoteTable = quoteTable

// QuoteColumn exposes the column quoting every builder uses, for the fuzz test.
var QuoteColumn = quoteColumn

// RaiseSQL is the fence raise Fenced sends, for the benchmark that compares it with
// the alternatives.
const RaiseSQL = engine.PGRaiseSQL

// MaxShapes is how many single-row statements a Store keeps.
const MaxShapes = engine.MaxShapes

// UpdateSQL builds Update's statement: bump raises the fence row with a plain UPDATE,
// else with the upsert; for the benchmark that compares the two.
func UpdateSQL(r fence.Row, set []fence.Col, bump bool) (string, error) {
	return updateSQL(r, set, bump)
}
