package pgxfence

// QuoteTable exposes the table quoting every builder uses, for the fuzz test.
var QuoteTable = quoteTable

// QuoteColumn exposes the column quoting every builder uses, for the fuzz test.
var QuoteColumn = quoteColumn
