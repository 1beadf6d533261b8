//go:build !linux

package localdb

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	// A process group of its own keeps a terminal's Ctrl-C away from the
	// server, so that our Stop shuts it down in order.
	return &syscall.SysProcAttr{Setpgid: true}
}
