package sqlfence

import "reflect"

// The package reads the errors of github.com/go-sql-driver/mysql (*mysql.MySQLError)
// and modernc.org/sqlite (*sqlite.Error) without importing either driver, so that a
// program on one database links no other's driver: the errors are found by their
// type's package and name, and read by their fields (MySQL) or method (SQLite).
const (
	mysqlPkg  = "github.com/go-sql-driver/mysql"
	sqlitePkg = "modernc.org/sqlite"
)

// mysqlError is what the package reads of a *mysql.MySQLError.
type mysqlError struct {
	Number   uint16
	SQLState string
	Message  string
}

// asMySQL returns the first *mysql.MySQLError in err's tree.
func asMySQL(err error) (mysqlError, bool) {
	e := findType(err, mysqlPkg, "MySQLError")
	if e == nil {
		return mysqlError{}, false
	}
	v := reflect.ValueOf(e).Elem()
	num, state, msg := v.FieldByName("Number"), v.FieldByName("SQLState"), v.FieldByName("Message")
	if !num.IsValid() || num.Kind() != reflect.Uint16 || !msg.IsValid() || msg.Kind() != reflect.String {
		return mysqlError{}, false
	}
	me := mysqlError{Number: uint16(num.Uint()), Message: msg.String()}
	if state.IsValid() && state.Kind() == reflect.Array && state.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, state.Len())
		for i := range b {
			b[i] = byte(state.Index(i).Uint())
		}
		me.SQLState = string(b)
	}
	return me, true
}

// sqliteError returns the first *sqlite.Error in err's tree: its result code (with
// the extended bits) and message.
func sqliteError(err error) (code int, msg string, ok bool) {
	e := findType(err, sqlitePkg, "Error")
	c, isCoder := e.(interface{ Code() int })
	if !isCoder {
		return 0, "", false
	}
	return c.Code(), e.Error(), true
}

// findType returns the first error in err's tree (as errors.As walks it) that is a
// pointer to the named type of package pkg, or nil.
func findType(err error, pkg, name string) error {
	for err != nil {
		if t := reflect.TypeOf(err); t.Kind() == reflect.Pointer && t.Elem().Name() == name && t.Elem().PkgPath() == pkg {
			if reflect.ValueOf(err).IsNil() {
				return nil
			}
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if f := findType(e, pkg, name); f != nil {
					return f
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}
