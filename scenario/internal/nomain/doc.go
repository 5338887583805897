// Package nomain is a test package without scenario.Main in its TestMain, for the
// kit's test that such a package's scenario fails saying what to add.
package nomain
