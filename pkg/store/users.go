package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// Users keeps the account console's users, their sessions and the
// counts of failed sign-ins. A user record and its email's index are
// global keys (a sign-in knows the email, not the account); the account
// lists its users in its own slot.
type Users struct{ db *DB }

// NewUsers returns the user store on db.
func NewUsers(db *DB) *Users { return &Users{db: db} }

// CreateUser makes a user of an existing account with a password hash.
// An email already taken is apperr.Conflict.
func (s *Users) CreateUser(ctx context.Context, accountID, email, passwordHash string, admin bool) (*account.User, error) {
	email, err := account.NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	a, err := NewAccounts(s.db).Get(ctx, accountID)
	if err != nil {
		return nil, err
	}
	id, err := account.NewUserID()
	if err != nil {
		return nil, err
	}
	u := &account.User{ID: id, Email: email, AccountID: a.ID, Admin: admin, Status: account.Active,
		CreatedAt: s.db.now().Truncate(time.Millisecond), Gen: 1}
	// The record first, the email's index last and only if free: a crash
	// between leaves a record no email leads to, and a lost race
	// removes its record.
	if err := s.db.rdb.HSet(ctx, userKey(id), fUserEmail, email, fUserAccount, a.ID, fUserPassword, passwordHash,
		fUserAdmin, boolField(admin), fUserStatus, string(account.Active), fUserCreated, u.CreatedAt.UnixMilli(), fUserGen, 1).Err(); err != nil {
		return nil, fmt.Errorf("store: create user: %w", err)
	}
	won, err := s.db.rdb.SetNX(ctx, emailKey(account.HashEmail(email)), id, 0).Result()
	if err != nil {
		return nil, fmt.Errorf("store: index user: %w", err)
	}
	if !won {
		_ = s.db.rdb.Del(ctx, userKey(id)).Err()
		return nil, apperr.Errorf(apperr.Conflict, "a user with the email %s exists already", email)
	}
	if err := s.db.rdb.SAdd(ctx, accountUsersKey(a.ID), id).Err(); err != nil {
		return nil, fmt.Errorf("store: list user: %w", err)
	}
	return u, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ErrNoUser is a user that does not exist.
var ErrNoUser = &apperr.NotFoundError{Kind: "user"}

// User returns a user and their password hash.
func (s *Users) User(ctx context.Context, id string) (*account.User, string, error) {
	m, err := s.db.rdb.HGetAll(ctx, userKey(id)).Result()
	if err != nil {
		return nil, "", fmt.Errorf("store: user: %w", err)
	}
	if len(m) == 0 {
		return nil, "", ErrNoUser
	}
	ms, _ := strconv.ParseInt(m[fUserCreated], 10, 64)
	gen, _ := strconv.ParseInt(m[fUserGen], 10, 64)
	return &account.User{ID: id, Email: m[fUserEmail], AccountID: m[fUserAccount], Admin: m[fUserAdmin] == "1",
		Status: account.Status(m[fUserStatus]), CreatedAt: time.UnixMilli(ms), Gen: gen}, m[fUserPassword], nil
}

// UserByEmail returns the user with an email and their password hash;
// ErrNoUser when there is none.
func (s *Users) UserByEmail(ctx context.Context, email string) (*account.User, string, error) {
	email, err := account.NormalizeEmail(email)
	if err != nil {
		return nil, "", ErrNoUser
	}
	id, err := s.db.rdb.Get(ctx, emailKey(account.HashEmail(email))).Result()
	if errors.Is(err, redis.Nil) {
		return nil, "", ErrNoUser
	}
	if err != nil {
		return nil, "", fmt.Errorf("store: user by email: %w", err)
	}
	return s.User(ctx, id)
}

// UsersOf returns an account's users, oldest first.
func (s *Users) UsersOf(ctx context.Context, accountID string) ([]*account.User, error) {
	ids, err := s.db.rdb.SMembers(ctx, accountUsersKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: users: %w", err)
	}
	out := make([]*account.User, 0, len(ids))
	for _, id := range ids {
		u, _, err := s.User(ctx, id)
		if errors.Is(err, ErrNoUser) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// UpdateUser changes a user's password hash (when not ""), status or
// admin flag (when not nil) and ends every session they had: a
// password reset or a disable signs them out everywhere.
func (s *Users) UpdateUser(ctx context.Context, id, passwordHash string, status *account.Status, admin *bool) (*account.User, error) {
	fields := []any{}
	if passwordHash != "" {
		fields = append(fields, fUserPassword, passwordHash)
	}
	if status != nil {
		if err := account.CheckStatus(*status); err != nil {
			return nil, err
		}
		fields = append(fields, fUserStatus, string(*status))
	}
	if admin != nil {
		fields = append(fields, fUserAdmin, boolField(*admin))
	}
	if _, _, err := s.User(ctx, id); err != nil {
		return nil, err
	}
	if _, err := s.db.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(fields) > 0 {
			p.HSet(ctx, userKey(id), fields...)
		}
		p.HIncrBy(ctx, userKey(id), fUserGen, 1)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: update user: %w", err)
	}
	u, _, err := s.User(ctx, id)
	return u, err
}

// A Session is a signed-in user's: kept under the hash of its id (the
// cookie's value), so what Redis holds cannot be used as a cookie.
type Session struct {
	UserID    string
	AccountID string
	// CSRF is the token every write of the session must send back.
	CSRF string
	// Gen is the user's Gen when it began: a session of another Gen is
	// over.
	Gen       int64
	CreatedAt time.Time
	// Until is its absolute end, whatever its use.
	Until time.Time
}

// SaveSession keeps a session under id's hash, idle for at most idle
// (and never past its Until).
func (s *Users) SaveSession(ctx context.Context, idHash string, ss Session, idle time.Duration) error {
	ttl := min(idle, ss.Until.Sub(s.db.now()))
	if ttl <= 0 {
		return apperr.New(apperr.Invalid, "a session that has ended")
	}
	if _, err := s.db.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, sessionKey(idHash), fSessUser, ss.UserID, fSessAccount, ss.AccountID, fSessCSRF, ss.CSRF,
			fSessGen, ss.Gen, fSessCreated, ss.CreatedAt.UnixMilli(), fSessUntil, ss.Until.UnixMilli())
		p.PExpire(ctx, sessionKey(idHash), ttl)
		return nil
	}); err != nil {
		return fmt.Errorf("store: save session: %w", err)
	}
	return nil
}

// ErrNoSession is a session that does not exist, or has ended.
var ErrNoSession = apperr.New(apperr.Unauthenticated, "not signed in, or the session has ended: sign in again")

// TouchSession returns the session under idHash and keeps it idle for
// idle more (never past its Until); ErrNoSession when there is none.
func (s *Users) TouchSession(ctx context.Context, idHash string, idle time.Duration) (Session, error) {
	m, err := s.db.rdb.HGetAll(ctx, sessionKey(idHash)).Result()
	if err != nil {
		return Session{}, fmt.Errorf("store: session: %w", err)
	}
	if len(m) == 0 {
		return Session{}, ErrNoSession
	}
	ms := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	ss := Session{UserID: m[fSessUser], AccountID: m[fSessAccount], CSRF: m[fSessCSRF], Gen: ms(fSessGen),
		CreatedAt: time.UnixMilli(ms(fSessCreated)), Until: time.UnixMilli(ms(fSessUntil))}
	ttl := min(idle, ss.Until.Sub(s.db.now()))
	if ttl <= 0 {
		_ = s.db.rdb.Del(ctx, sessionKey(idHash)).Err()
		return Session{}, ErrNoSession
	}
	if err := s.db.rdb.PExpire(ctx, sessionKey(idHash), ttl).Err(); err != nil {
		return Session{}, fmt.Errorf("store: session: %w", err)
	}
	return ss, nil
}

// EndSession ends the session under idHash.
func (s *Users) EndSession(ctx context.Context, idHash string) error {
	if err := s.db.rdb.Del(ctx, sessionKey(idHash)).Err(); err != nil {
		return fmt.Errorf("store: end session: %w", err)
	}
	return nil
}

var attemptLua = newScript[attemptKeys, attemptArgs, attemptReply]("attempt", map[string]int64{"COUNTED": 1})

type attemptKeys struct {
	Count string `lua:"count"`
}

type attemptArgs struct {
	Window int64 `lua:"window"`
}

type attemptReply struct {
	Code     int64 `lua:"code"`
	Attempts int64 `lua:"attempts"`
	TTL      int64 `lua:"ttl"`
}

// Attempt counts a sign-in attempt under each name (window: each count is
// forgotten that long after its first attempt) and reports whether one
// of them is over its limit (limits[i], 0: none), with the longest wait
// until the counts over their limits are forgotten. Counting comes first,
// so attempts made at once cannot all pass before any is counted. An
// error counts nothing: the names counted before it are given back.
func (s *Users) Attempt(ctx context.Context, window time.Duration, names []string, limits []int64) (bool, time.Duration, error) {
	over, wait := false, time.Duration(0)
	// One script a name (the names are keys of different slots; a sign-in
	// is rare enough for a round trip each).
	for i, n := range names {
		r, err := attemptLua.Call(ctx, s.db.rdb, attemptKeys{Count: signInKey(n)}, attemptArgs{Window: window.Milliseconds()})
		if err != nil {
			if i > 0 {
				gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackBudget)
				_ = s.GiveBackAttempts(gctx, names[:i]...)
				cancel()
			}
			return false, 0, fmt.Errorf("store: count a sign-in: %w", err)
		}
		if limits[i] > 0 && r.Attempts > limits[i] {
			over = true
			wait = max(wait, time.Duration(r.TTL)*time.Millisecond)
		}
	}
	return over, wait, nil
}

// giveBackBudget bounds giving back what a failed count counted.
const giveBackBudget = time.Second

var unattemptLua = newScript[unattemptKeys, struct{}, unattemptReply]("unattempt", map[string]int64{"GIVEN": 1})

type unattemptKeys struct {
	Count string `lua:"count"`
}

type unattemptReply struct {
	Code int64 `lua:"code"`
	Left int64 `lua:"left"`
}

// GiveBackAttempts takes one attempt off the count under each name (an
// attempt counted and then never checked), never below zero.
func (s *Users) GiveBackAttempts(ctx context.Context, names ...string) error {
	for _, n := range names {
		if _, err := unattemptLua.Call(ctx, s.db.rdb, unattemptKeys{Count: signInKey(n)}, struct{}{}); err != nil {
			return fmt.Errorf("store: give back a sign-in attempt: %w", err)
		}
	}
	return nil
}

// ForgetAttempts clears the attempts counted under names (a successful
// sign-in clears its own).
func (s *Users) ForgetAttempts(ctx context.Context, names ...string) error {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = signInKey(n)
	}
	return s.db.rdb.Del(ctx, keys...).Err()
}

// KnownNetwork reports whether an email (by its hash) signed in from a
// network, and that is not yet forgotten: one look-up, whatever the
// number of users.
func (s *Users) KnownNetwork(ctx context.Context, emailHash, network string) (bool, error) {
	until, err := s.db.rdb.ZScore(ctx, knownNetworksKey(emailHash), network).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: known network: %w", err)
	}
	return int64(until) > s.db.now().UnixMilli(), nil
}

// RememberNetwork keeps that an email (by its hash) signed in from a
// network, for ttl; an email keeps at most keep networks (the ones
// remembered last), and its set goes when its last network is forgotten.
func (s *Users) RememberNetwork(ctx context.Context, emailHash, network string, ttl time.Duration, keep int) error {
	k, now := knownNetworksKey(emailHash), s.db.now()
	if _, err := s.db.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: network})
		p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		p.ZRemRangeByRank(ctx, k, 0, int64(-keep-1))
		p.PExpire(ctx, k, ttl)
		return nil
	}); err != nil {
		return fmt.Errorf("store: remember a network: %w", err)
	}
	return nil
}
