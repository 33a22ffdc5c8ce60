package main

import (
	"context"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
)

// The benchmark reads and writes Easel's Redis through package store, the
// only package that names its keys.

// accounts is the account store on the benchmark's Redis.
func (e *env) accounts() *store.Accounts {
	return store.NewAccounts(store.NewDB(e.rdb, store.Options{}))
}

// tasks is the task store on the benchmark's Redis.
func (e *env) tasks() *store.Tasks {
	return store.NewTasks(store.NewDB(e.rdb, store.Options{}))
}

// eachTask calls fn with every task of an account, newest first, until fn
// returns an error. It pages through the account's listing (Tasks.List):
// the tasks created in the last day plus their deadline, which is every
// task a benchmark run makes.
func eachTask(ctx context.Context, tasks *store.Tasks, acct string, fn func(*task.Task) error) error {
	f := task.Filter{Limit: 1000}
	for {
		page, next, err := tasks.List(ctx, acct, f)
		if err != nil {
			return err
		}
		for _, t := range page {
			if err := fn(t); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		f.Cursor = next
	}
}
