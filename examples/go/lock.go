// Package zset: the Go service's lock store (the three Lua scripts of
// iotlcm/internal/queue/zset/lock.go) on the redis-lock module, with
// go-redis v9's generic Do. Each method keeps its name, its arguments, its
// checks and its (bool, error) result; only the call changes. See
// docs/clients.md, "Go: migrating the service from the scripts".
//
// NOT COMPILED in this repository: go-redis v9 is not packaged by Debian
// and the Go module proxy is not reachable from its machines, so no test
// builds or runs this file. The commands and replies it relies on are the
// ones examples/python/locks.py and examples/node/locks.js check on every
// `scripts/test`.
package zset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store holds the shared client (a *redis.Client or *redis.ClusterClient:
// both route Do by the key, argument 1) and, for waiting acquires, the
// options to open dedicated connections with.
type Store struct {
	redis redis.UniversalClient
	// Only for AcquireLockWaiting: the single-server options, or nil.
	opts *redis.Options
}

// AcquireLock obtains a Redis lease only when the key is absent.
// Was: SET key token NX PX ttl.
func (s *Store) AcquireLock(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if key == "" || token == "" {
		return false, fmt.Errorf("lock key and token are required")
	}
	if ttl <= 0 {
		return false, fmt.Errorf("lock ttl must be positive")
	}
	n, err := s.redis.Do(ctx, "LOCK.ACQUIRE", key, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("acquire lock: %w", err)
	}
	return n == 1, nil
}

// RenewLock extends the lease only when the token still owns the key.
// Was: EVAL renewLockScript 1 key token ttl.
func (s *Store) RenewLock(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if key == "" || token == "" {
		return false, fmt.Errorf("lock key and token are required")
	}
	if ttl <= 0 {
		return false, fmt.Errorf("lock ttl must be positive")
	}
	n, err := s.redis.Do(ctx, "LOCK.RENEW", key, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("renew lock: %w", err)
	}
	// 2: renewed, but only up to a MAXHOLD limit (never asked for here).
	return n == 1 || n == 2, nil
}

// ReleaseLock removes the key only when the token still owns it.
// Was: EVAL releaseLockScript 1 key token.
func (s *Store) ReleaseLock(ctx context.Context, key, token string) (bool, error) {
	if key == "" || token == "" {
		return false, fmt.Errorf("lock key and token are required")
	}
	n, err := s.redis.Do(ctx, "LOCK.RELEASE", key, token).Int64()
	if err != nil {
		return false, fmt.Errorf("release lock: %w", err)
	}
	return n == 1, nil
}

// AcquireLockOrTakeover acquires key for token, or takes it over from a
// dead run with the same runID, or from a legacy bare token that has
// stopped renewing (TTL/2 or less left). The rules are the script's,
// decided in the server; runID "" degrades to AcquireLock, as before.
// Was: EVAL acquireOrTakeoverLockScript 1 key {"owner":token,"runId":runID} ttl.
func (s *Store) AcquireLockOrTakeover(ctx context.Context, key, token, runID string, ttl time.Duration) (bool, error) {
	if key == "" || token == "" {
		return false, fmt.Errorf("lock key and token are required")
	}
	if ttl <= 0 {
		return false, fmt.Errorf("lock ttl must be positive")
	}
	if runID == "" {
		return s.AcquireLock(ctx, key, token, ttl)
	}
	n, err := s.redis.Do(ctx, "LOCK.TAKEOVER", key, token, runID, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("acquire or take over lock: %w", err)
	}
	return n == 1, nil
}

// AcquireLockFenced is AcquireLock with a fencing token: 0 when the key is
// held. Send the fence with every write the lock guards; the resource
// refuses a fence smaller than the largest it has seen.
func (s *Store) AcquireLockFenced(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	fence, err := s.redis.Do(ctx, "LOCK.ACQUIRE", key, token, ttl.Milliseconds(), "FENCE").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil // held by someone else
	}
	if err != nil {
		return 0, fmt.Errorf("acquire lock: %w", err)
	}
	return fence, nil
}

// AcquireLockWaiting queues in the server for up to wait and returns the
// fence, or 0 when the wait ran out. A client blocked in the server runs
// nothing else, so the wait gets a connection of its own, never the
// shared pool's, with a read timeout longer than the wait (go-redis's
// default, 3 s, would cut a longer wait short and drop the connection).
func (s *Store) AcquireLockWaiting(ctx context.Context, key, token string, ttl, wait time.Duration) (int64, error) {
	opts := *s.opts
	opts.PoolSize = 1
	opts.ReadTimeout = wait + 2*time.Second
	conn := redis.NewClient(&opts)
	defer conn.Close()
	fence, err := conn.Do(ctx, "LOCK.ACQUIRE", key, token, ttl.Milliseconds(), "FENCE", "WAIT", wait.Milliseconds()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil // the wait ran out
	}
	if err != nil {
		return 0, fmt.Errorf("acquire lock: %w", err)
	}
	return fence, nil
}
