package store

import (
	"context"
	"fmt"
	"time"
)

// uploadBytesKey is the key of an account's upload bytes of a UTC day
// (YYYYMMDD), in the account's slot.
func uploadBytesKey(accountID, day string) string { return tag(accountID) + "upb:" + day }

var uploadBytesLua = newScript[uploadBytesKeys, uploadBytesArgs, uploadBytesReply]("upload_bytes", map[string]int64{"COUNTED": 1, "OVER": 0})

type uploadBytesKeys struct {
	Counter string `lua:"counter"`
}

type uploadBytesArgs struct {
	Size     int64 `lua:"size"`
	Budget   int64 `lua:"budget"`
	ExpireAt int64 `lua:"expire_at"`
}

type uploadBytesReply struct {
	Code int64 `lua:"code"`
	Used int64 `lua:"used"`
}

// Uploads keeps the accounts' daily upload byte counts.
type Uploads struct{ db *DB }

// NewUploads returns the upload counts kept in db.
func NewUploads(db *DB) *Uploads { return &Uploads{db: db} }

// Count adds size bytes to the account's uploads of the UTC day of now,
// unless that takes the day over budget bytes: then nothing is counted and
// ok is false. used is the day's bytes after (or, refused, before). A day's
// count is kept until an hour after the day ends.
func (s *Uploads) Count(ctx context.Context, accountID string, size, budget int64, now time.Time) (used int64, ok bool, err error) {
	day := now.UTC().Truncate(24 * time.Hour)
	r, err := uploadBytesLua.run(ctx, s.db, uploadBytesKeys{Counter: uploadBytesKey(accountID, day.Format("20060102"))},
		uploadBytesArgs{Size: size, Budget: budget, ExpireAt: day.Add(25 * time.Hour).UnixMilli()})
	if err != nil {
		return 0, false, fmt.Errorf("store: upload bytes %s: %w", accountID, err)
	}
	return r.Used, r.Code == 1, nil
}
