package pgxfence

import "github.com/fencegate/fencegate/internal/shapecache"

// QuoteTable exposes the table quoting every builder uses, for the fuzz test.
var QuoteTable = quoteTable

// QuoteColumn exposes the column quoting every builder uses, for the fuzz test.
var QuoteColumn = quoteColumn

// RaiseSQL is the fence raise Fenced sends, for the benchmark that compares it with
// the alternatives.
const RaiseSQL = raiseSQL

// MaxShapes is how many single-row statements a Store keeps.
const MaxShapes = shapecache.Max
