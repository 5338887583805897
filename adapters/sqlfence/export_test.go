package sqlfence

import (
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/migrations"
)

// QuoteTable exposes the table quoting every builder uses, for the fuzz test.
func QuoteTable(d migrations.Dialect, name string) (string, error) {
	return dialect.QuoteTable(d, name)
}

// QuoteColumn exposes the column quoting every builder uses, for the fuzz test.
func QuoteColumn(d migrations.Dialect, name string) (string, error) {
	return dialect.CheckIdent(d, "column", name)
}

// MaxShapes is how many counter shapes a Store keeps built, for the test past it.
const MaxShapes = dialect.MaxShapes

// Dialect returns the store's dialect, for tests that build SQL of their own.
func (s *Store) Dialect() migrations.Dialect { return s.d.dialect() }
