package main

import "context"

// setup applies the library's migrations (fence_tokens) and the billing schema, and
// inserts a zero row for every account that has none.
func setup(ctx context.Context, cfg config) error {
	s, err := openStore(ctx, cfg.dsn, cfg.idle)
	if err != nil {
		return err
	}
	defer s.close()
	if err := waitDB(ctx, s); err != nil {
		return err
	}
	return s.setup(ctx, cfg.accounts)
}
