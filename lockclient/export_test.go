package lockclient

import "time"

// RenewOnce makes c renew its session by clientv3's KeepAliveOnce, a new gRPC
// stream per renewal, as it did before the long-lived stream: the seed-scale
// benchmark measures the two designs in one run. Call it before c's first
// Acquire.
func RenewOnce(c *Client) { c.renewOnce = true }

// LazySession makes c give its session lease up (to expire in etcd) when it
// holds no lock at renewal time, so that the next Acquire grants a new one: the
// lazy-session design, measured by the seed-scale benchmark. Call it before
// c's first Acquire.
func LazySession(c *Client) { c.lazy = true }

// RenewOnGrid makes c send each renewal at the last multiple of grid of the
// wall clock before it is due (never later), so that the renewals of many
// Clients reach etcd together in bursts instead of spread evenly: a design the
// seed-scale benchmark measures. Call it before c's first Acquire.
func RenewOnGrid(c *Client, grid time.Duration) { c.grid = grid }

// CheckLockName is checkName, for the fuzz test of lock name validation.
var CheckLockName = checkName
