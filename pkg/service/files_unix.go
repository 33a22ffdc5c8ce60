//go:build unix

package service

import "syscall"

// FileLimit is the process's limit of open files (its soft RLIMIT_NOFILE),
// 0 if unknown. The Go runtime raises the soft limit to the hard one at
// start (Go 1.19 and later), so this is as high as the system allows.
func FileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
