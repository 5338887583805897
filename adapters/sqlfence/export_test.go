package sqlfence

import "github.com/fencegate/fencegate/internal/shapecache"

// QuoteTable exposes the table quoting every builder uses, for the fuzz test.
func QuoteTable(d Dialect, name string) (string, error) { return d.table(name) }

// QuoteColumn exposes the column quoting every builder uses, for the fuzz test.
func QuoteColumn(d Dialect, name string) (string, error) { return d.ident("column", name) }

// MaxShapes is how many counter shapes a Store keeps built, for the test past it.
const MaxShapes = shapecache.Max
