package scenario

import (
	"encoding/binary"
	"strings"
)

// pgFrames follows a PostgreSQL client's messages across the chunks of one
// connection (the frontend protocol, version 3), to tell which chunk runs a
// statement.
type pgFrames struct {
	head    []byte // a message header (or a Query) not yet whole
	skip    int    // bytes of a message body still to pass over
	started bool   // past the startup message: each message begins with its type
	tls     bool   // the client asked for TLS or GSS encryption
	bad     bool   // not readable: nothing more is parsed
}

// pgChunk is what one chunk of a client's bytes holds.
type pgChunk struct {
	runs   bool   // a statement that runs (Query, Execute, FunctionCall), not a lone BEGIN or a ping
	cancel bool   // a CancelRequest: the connection only cancels another one's statement
	bad    string // not PostgreSQL's protocol in plain text: why
}

// Codes of the untyped messages a connection starts with.
const (
	pgCancel   = 80877102
	pgSSL      = 80877103
	pgGSS      = 80877104
	maxStartup = 10000 // PostgreSQL's own bound on a startup packet
)

// feed reads data, the connection's next chunk from the client.
func (f *pgFrames) feed(data []byte) (c pgChunk) {
	for !f.bad {
		if f.skip > 0 {
			n := min(f.skip, len(data))
			f.skip -= n
			data = data[n:]
		}
		need := 5
		if !f.started {
			need = 8
		}
		if f.skip > 0 || len(f.head) < need && len(data) == 0 {
			return c
		}
		if len(f.head) < need {
			n := min(need-len(f.head), len(data))
			f.head = append(f.head, data[:n]...)
			data = data[n:]
			continue
		}
		if f.started && f.head[0] == 'Q' && len(data) == 0 {
			return c // a Query's text is still to come
		}
		if f.started {
			data = f.typed(data, &c)
		} else {
			f.untyped(&c)
		}
	}
	return c
}

// untyped reads a startup-phase message from its 8-byte header: length and code.
func (f *pgFrames) untyped(c *pgChunk) {
	n := int(binary.BigEndian.Uint32(f.head))
	code := binary.BigEndian.Uint32(f.head[4:])
	f.head = f.head[:0]
	switch {
	case n < 8 || n > maxStartup:
		f.fail(c, f.tls)
		return
	case code == pgCancel:
		c.cancel = true
	case code == pgSSL || code == pgGSS:
		f.tls = true // a server that refuses answers 'N', and the startup message follows
	case code>>16 == 3:
		f.started = true
	default:
		f.fail(c, false)
		return
	}
	f.skip = n - 8
}

// typed reads a message from its 5-byte header (type, length): a Query's text is
// read whole, any other body is passed over.
func (f *pgFrames) typed(data []byte, c *pgChunk) []byte {
	typ, n := f.head[0], int(binary.BigEndian.Uint32(f.head[1:5]))
	if n < 4 {
		f.fail(c, false)
		return nil
	}
	if typ != 'Q' {
		f.head = f.head[:0]
		f.skip = n - 4
		if typ == 'E' || typ == 'F' {
			c.runs = true
		}
		return data
	}
	want := 1 + n - len(f.head)
	take := min(want, len(data))
	f.head = append(f.head, data[:take]...)
	if take == want {
		if runsSQL(strings.TrimRight(string(f.head[5:]), "\x00")) {
			c.runs = true
		}
		f.head = f.head[:0]
	}
	return data[take:]
}

func (f *pgFrames) fail(c *pgChunk, tls bool) {
	f.bad = true
	c.bad = "its store connection does not speak PostgreSQL's protocol in plain text, so the kit cannot find its statements"
	if tls {
		c.bad = "its store connection uses TLS, so the kit cannot find its statements: connect with sslmode=disable"
	}
}

// runsSQL reports whether a simple Query's text runs a statement: not only
// comments (pgx's ping), not a lone BEGIN or START TRANSACTION (it writes
// nothing; the statement after it is the write).
func runsSQL(q string) bool {
	for {
		q = strings.TrimLeft(q, " \t\r\n;")
		switch {
		case strings.HasPrefix(q, "--"):
			_, q, _ = strings.Cut(q, "\n")
		case strings.HasPrefix(q, "/*"):
			_, q, _ = strings.Cut(q, "*/")
		default:
			q = strings.ToLower(strings.TrimRight(q, " \t\r\n;"))
			if q == "" {
				return false
			}
			begins := strings.HasPrefix(q, "begin") || strings.HasPrefix(q, "start transaction")
			return !begins || strings.Contains(q, ";")
		}
	}
}
