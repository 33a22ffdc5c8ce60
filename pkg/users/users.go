// Package users is the account console's people: making users of an
// account with a password (argon2id, package password), resetting and
// disabling them, signing in with attempts counted per network and per
// email in Redis (so every gateway counts them together) and the networks
// each email signed in from remembered, and sessions with an idle and an
// absolute lifetime.
package users

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/password"
	"github.com/easelhq/easel/pkg/store"
)

// Config is the console's sign-in and session settings.
type Config struct {
	// Idle: a session unused this long ends. Max: a session ends this
	// long after sign-in, however used.
	Idle, Max time.Duration
	// FailWindow: sign-in attempts are counted over this window from the
	// first, each before it is checked (so attempts made at once cannot
	// all pass), and given back if it is then never checked (no hashing
	// slot, a dependency that failed); a successful sign-in clears its
	// own counts. Past MaxPerPair for one email from one client network
	// (the address, an IPv6 /64), MaxPerAddr from one client network, or
	// MaxPerEmail for one email from anywhere, sign-ins are refused (429)
	// until the window ends. The per-email bound is high: it stops a guess
	// spread over many networks without letting a few requests lock an
	// owner out.
	FailWindow  time.Duration
	MaxPerPair  int64
	MaxPerAddr  int64
	MaxPerEmail int64
	// An email's known networks are those it signed in from (a /24, an
	// IPv6 /64, a loopback address alone; KnownNetwork), each remembered
	// for KnownFor after its last sign-in, at most KnownKeep an email (the
	// latest). From a known network the per-email budget is not spent or
	// checked: MaxPerKnown for the email from that network is, so failures
	// from elsewhere never lock the owner out of where they signed in
	// before.
	KnownFor    time.Duration
	KnownKeep   int
	MaxPerKnown int64
	// HashLine is how many sign-ins may wait for a hashing slot (one a
	// client network), HashWait how long each may (past it: 503, never
	// counted).
	HashLine int
	HashWait time.Duration
	// Budget bounds the Redis calls of a sign-in before its hash, and
	// those after it: the wait for a slot and the hash spend none of it.
	Budget time.Duration
	// Params are the password hash's costs (password.Default when zero).
	Params password.Params
}

// Defaults.
var Defaults = Config{Idle: 2 * time.Hour, Max: 12 * time.Hour, FailWindow: 15 * time.Minute, MaxPerPair: 10, MaxPerAddr: 50, MaxPerEmail: 200,
	KnownFor: 30 * 24 * time.Hour, KnownKeep: 8, MaxPerKnown: 50, HashLine: 64, HashWait: 3 * time.Second, Budget: 2 * time.Second}

// Store keeps users and sessions (store.Users).
type Store interface {
	CreateUser(ctx context.Context, accountID, email, passwordHash string, admin bool) (*account.User, error)
	User(ctx context.Context, id string) (*account.User, string, error)
	UserByEmail(ctx context.Context, email string) (*account.User, string, error)
	UpdateUser(ctx context.Context, id, passwordHash string, status *account.Status, admin *bool) (*account.User, error)
	SaveSession(ctx context.Context, idHash string, s store.Session, idle time.Duration) error
	TouchSession(ctx context.Context, idHash string, idle time.Duration) (store.Session, error)
	EndSession(ctx context.Context, idHash string) error
	Attempt(ctx context.Context, window time.Duration, names []string, limits []int64) (bool, time.Duration, error)
	GiveBackAttempts(ctx context.Context, names ...string) error
	ForgetAttempts(ctx context.Context, names ...string) error
	KnownNetwork(ctx context.Context, emailHash, network string) (bool, error)
	RememberNetwork(ctx context.Context, emailHash, network string, ttl time.Duration, keep int) error
}

// Service signs users in and keeps their sessions.
type Service struct {
	st  Store
	cfg Config
	// hashing bounds the password hashes computed at once (each takes the
	// parameters' memory, 19 MiB by default) and lines up the rest.
	hashing *gate
	// decoy is checked when no user has the email, so that an unknown
	// email takes as long as a wrong password.
	decoy string
	Now   func() time.Time
}

// New returns the service.
func New(st Store, cfg Config) (*Service, error) {
	if cfg.Params == (password.Params{}) {
		cfg.Params = password.Default
	}
	d := Defaults
	for _, f := range []struct{ v, d *time.Duration }{{&cfg.KnownFor, &d.KnownFor}, {&cfg.HashWait, &d.HashWait}, {&cfg.Budget, &d.Budget}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if cfg.KnownKeep <= 0 {
		cfg.KnownKeep = d.KnownKeep
	}
	if cfg.HashLine <= 0 {
		cfg.HashLine = d.HashLine
	}
	decoy, err := password.Hash("decoy password, never anyone's", cfg.Params)
	if err != nil {
		return nil, err
	}
	return &Service{st: st, cfg: cfg, hashing: newGate(max(runtime.GOMAXPROCS(0), 2), cfg.HashLine), decoy: decoy, Now: time.Now}, nil
}

// hash hashes a new password, after checking it is acceptable.
func (s *Service) hash(ctx context.Context, pw string) (string, error) {
	if err := password.Check(pw); err != nil {
		return "", apperr.New(apperr.Invalid, err.Error())
	}
	release, err := s.hashing.enter(ctx, "", 0)
	if err != nil {
		return "", err
	}
	defer release()
	return password.Hash(pw, s.cfg.Params)
}

// Create makes a user of an account, with a password.
func (s *Service) Create(ctx context.Context, accountID, email, pw string, admin bool) (*account.User, error) {
	h, err := s.hash(ctx, pw)
	if err != nil {
		return nil, err
	}
	return s.st.CreateUser(ctx, accountID, email, h, admin)
}

// ByEmail returns the user with an email.
func (s *Service) ByEmail(ctx context.Context, email string) (*account.User, error) {
	u, _, err := s.st.UserByEmail(ctx, email)
	return u, err
}

// ResetPassword sets a user's password and signs them out everywhere.
func (s *Service) ResetPassword(ctx context.Context, email, pw string) (*account.User, error) {
	u, err := s.ByEmail(ctx, email)
	if err != nil {
		return nil, err
	}
	h, err := s.hash(ctx, pw)
	if err != nil {
		return nil, err
	}
	return s.st.UpdateUser(ctx, u.ID, h, nil, nil)
}

// SetStatus disables (signing them out everywhere) or enables a user.
func (s *Service) SetStatus(ctx context.Context, email string, st account.Status) (*account.User, error) {
	u, err := s.ByEmail(ctx, email)
	if err != nil {
		return nil, err
	}
	return s.st.UpdateUser(ctx, u.ID, "", &st, nil)
}

// SetAdmin gives or takes the operator view.
func (s *Service) SetAdmin(ctx context.Context, email string, admin bool) (*account.User, error) {
	u, err := s.ByEmail(ctx, email)
	if err != nil {
		return nil, err
	}
	return s.st.UpdateUser(ctx, u.ID, "", nil, &admin)
}

// ThrottledError is a sign-in refused for the failures before it.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed sign-ins from this address or for this email; try again in %s", e.RetryAfter.Round(time.Second))
}

// ErrorCode implements apperr.Coded.
func (e *ThrottledError) ErrorCode() apperr.Code { return apperr.LimitExceeded }

// ErrWrongCredentials answers a wrong password and an unknown email
// alike.
var ErrWrongCredentials = apperr.New(apperr.Unauthenticated, "wrong email or password")

// A Signed is a session begun: Token is the cookie's value.
type Signed struct {
	Token   string
	Session Session
	User    *account.User
}

// Session is a signed-in user's session, as the console reads it.
type Session struct {
	UserID    string
	AccountID string
	// CSRF is the token every write of the session must send back.
	CSRF string
	// Until is its absolute end, whatever its use.
	Until time.Time
}

// ErrNoSession answers a session that does not exist or has ended.
var ErrNoSession = store.ErrNoSession

func sessionOf(ss store.Session) Session {
	return Session{UserID: ss.UserID, AccountID: ss.AccountID, CSRF: ss.CSRF, Until: ss.Until}
}

// SignIn checks an email and password from a client address and begins a
// session. Wrong credentials are ErrWrongCredentials whatever was wrong;
// past the failures allowed, *ThrottledError before any check. ctx is
// the client's: Config.Budget bounds the Redis calls, Config.HashWait the
// wait for a hashing slot.
func (s *Service) SignIn(ctx context.Context, email, pw, addr string) (Signed, error) {
	norm, err := account.NormalizeEmail(email)
	if err != nil {
		norm = email // counted all the same, under what was sent
	}
	net, home := network(addr), KnownNetwork(addr)
	emailHash := account.HashEmail(norm)
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	known, err := s.st.KnownNetwork(rctx, emailHash, home)
	if err != nil {
		return Signed{}, err
	}
	names := []string{"pair:" + emailHash + ":" + net, "addr:" + net, "email:" + emailHash}
	limits := []int64{s.cfg.MaxPerPair, s.cfg.MaxPerAddr, s.cfg.MaxPerEmail}
	if known {
		names[2], limits[2] = "known:"+emailHash+":"+home, s.cfg.MaxPerKnown
	}
	over, wait, err := s.st.Attempt(rctx, s.cfg.FailWindow, names, limits)
	if err != nil {
		return Signed{}, err
	}
	checked := false
	defer func() {
		if !checked {
			// Refused or never checked: the attempt costs no budget (a
			// flood's refusals do not spend the owner's).
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Budget)
			defer cancel()
			_ = s.st.GiveBackAttempts(gctx, names...)
		}
	}()
	if over {
		return Signed{}, &ThrottledError{RetryAfter: max(wait, time.Second)}
	}
	u, stored, err := s.st.UserByEmail(rctx, norm)
	if err != nil && !errors.Is(err, store.ErrNoUser) {
		return Signed{}, err
	}
	good, err := s.verify(ctx, pw, stored, net)
	if err != nil {
		return Signed{}, err
	}
	checked = true
	if u == nil || !good || u.Status != account.Active {
		return Signed{}, ErrWrongCredentials
	}
	// The hash took its time; the writes that sign the user in get their
	// own budget, so a saturated machine's slow hash does not turn a right
	// password into an error.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Budget)
	defer wcancel()
	// Signed in: this pair's and this email's attempts are forgotten (the
	// network's count keeps others' failures), and the network is known.
	_ = s.st.ForgetAttempts(wctx, names[0], names[2])
	_ = s.st.RememberNetwork(wctx, emailHash, home, s.cfg.KnownFor, s.cfg.KnownKeep)
	token, err := randomToken()
	if err != nil {
		return Signed{}, err
	}
	csrf, err := randomToken()
	if err != nil {
		return Signed{}, err
	}
	now := s.Now()
	ss := store.Session{UserID: u.ID, AccountID: u.AccountID, CSRF: csrf, Gen: u.Gen, CreatedAt: now, Until: now.Add(s.cfg.Max)}
	if err := s.st.SaveSession(wctx, TokenHash(token), ss, s.cfg.Idle); err != nil {
		return Signed{}, err
	}
	return Signed{Token: token, Session: sessionOf(ss), User: u}, nil
}

// verify checks pw against stored, or against the decoy when there is no
// user (""), once the client network net has its turn to hash.
func (s *Service) verify(ctx context.Context, pw, stored, net string) (bool, error) {
	release, err := s.hashing.enter(ctx, net, s.cfg.HashWait)
	if err != nil {
		return false, err
	}
	defer release()
	if stored == "" {
		_, _ = password.Verify(pw, s.decoy)
		return false, nil
	}
	ok, err := password.Verify(pw, stored)
	if err != nil {
		return false, apperr.Wrap(err, apperr.Internal, "")
	}
	return ok, nil
}

// Session returns the session of a token and its user, keeping it alive;
// ErrNoSession when it has ended (signed out, idle or past its lifetime,
// or its user's password or status changed since).
func (s *Service) Session(ctx context.Context, token string) (Session, *account.User, error) {
	if token == "" || len(token) > 100 {
		return Session{}, nil, ErrNoSession
	}
	h := TokenHash(token)
	ss, err := s.st.TouchSession(ctx, h, s.cfg.Idle)
	if err != nil {
		return Session{}, nil, err
	}
	u, _, err := s.st.User(ctx, ss.UserID)
	if errors.Is(err, store.ErrNoUser) || (err == nil && (u.Gen != ss.Gen || u.Status != account.Active)) {
		_ = s.st.EndSession(ctx, h)
		return Session{}, nil, ErrNoSession
	}
	if err != nil {
		return Session{}, nil, err
	}
	return sessionOf(ss), u, nil
}

// SignOut ends a token's session.
func (s *Service) SignOut(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	return s.st.EndSession(ctx, TokenHash(token))
}

// network is what sign-in attempts are counted under for a client
// address: the address itself (IPv4), or its /64 (IPv6: one client
// usually holds a whole /64).
func network(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// KnownNetwork is the network a sign-in from addr makes known for its
// email: its /24 (IPv4) or /64 (IPv6), where an owner's addresses
// usually stay from one day to the next; a loopback address alone (every
// loopback address is this machine, so a /8 would make any local client
// known).
func KnownNetwork(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	bits := 64
	switch {
	case ip.IsLoopback():
		bits = ip.BitLen()
	case ip.Is4():
		bits = 24
	}
	p, _ := ip.Prefix(bits)
	return p.String()
}

// TokenHash is the form a session's token is kept under.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
