package main

import "syscall"

// childAttr makes the kernel kill a child when the goroutine's thread that
// started it exits, so that no replica outlives a chaos run that died.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
