package store

import (
	"context"
	"fmt"
)

// Running is how many generations of an account hold a place (Place) now.
func (s *Store) Running(ctx context.Context, accountID string) (int64, error) {
	n, err := s.rdb.ZCount(ctx, runningKey(accountID), fmt.Sprint(s.now().UnixMilli()), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("store: running of %s: %w", accountID, err)
	}
	return n, nil
}
