//go:build !linux

package delayproxy

import "time"

// fineTimerSlack does nothing outside Linux, which alone has PR_SET_TIMERSLACK.
func fineTimerSlack() {}

// waitUntil returns at t, give or take the Go runtime's timer resolution.
func waitUntil(t time.Time) { time.Sleep(time.Until(t)) }
