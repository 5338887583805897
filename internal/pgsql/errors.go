package pgsql

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// PostgreSQL's SQLSTATEs the adapters tell apart, through either driver.
const (
	BadText         = "22P02" // raised on purpose by the raise: see StaleMarker
	Serialization   = "40001"
	Deadlock        = "40P01"
	LockUnavailable = "55P03"
	Unique          = "23505"
	NoFunction      = "42883"
	NoTable         = "42P01"
	NoColumn        = "42703"
	NoConstraint    = "42P10" // ON CONFLICT names no unique index
	IdleTimeout     = "25P03" // idle_in_transaction_session_timeout ended the session
)

// Refusal maps a raise's or COMMIT's error to a *fence.StaleError, fence.ErrBusy
// (40001), fence.ErrSchema or fence.ErrIdleTimeout; nil for any other.
func Refusal(g fence.Grant, state, msg string, err error) error {
	switch state {
	case BadText:
		if seen, res, ok := MarkedStale(msg); ok {
			if res == "" {
				res = g.Resource()
			}
			return &fence.StaleError{Resource: res, Presented: g.Token(), Seen: seen}
		}
	case Serialization:
		return fmt.Errorf("%w: fence %q at token %d: %w", fence.ErrBusy, g.Resource(), g.Token(), err)
	case NoFunction, NoTable:
		return fmt.Errorf("%w: %w", fence.ErrSchema, err)
	case IdleTimeout:
		return grant.IdleTimeoutErr(g, err)
	}
	return nil
}

// ReplyLost reports whether an error reply to COMMIT, or to a write outside a
// transaction, leaves the outcome unknown: FATAL or PANIC may follow a recorded
// commit; ERROR and 25P03 (ended idle before COMMIT) decide. With no severity (""),
// classes 08 and 57P, which end a session, say it.
func ReplyLost(state, severity string) bool {
	switch {
	case state == IdleTimeout:
		return false
	case severity != "":
		return severity == "FATAL" || severity == "PANIC"
	}
	return strings.HasPrefix(state, "08") || strings.HasPrefix(state, "57P")
}
