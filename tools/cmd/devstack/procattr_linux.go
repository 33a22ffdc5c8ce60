package main

import "syscall"

// sysProcAttr puts a child in its own process group, so a terminal's Ctrl-C
// reaches only devstack, which then stops the children in order; and kills
// the child if devstack itself dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
