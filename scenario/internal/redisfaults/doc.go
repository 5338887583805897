// Package redisfaults holds the scenario kit's tests on Redis (redisfence), in a
// module of its own so that go-redis stays out of the kit's go.sum.
package redisfaults
