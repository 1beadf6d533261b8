package localdb

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		// A process group of its own keeps a terminal's Ctrl-C away from
		// the server, so that our Stop shuts it down in order.
		Setpgid: true,
		// If we die without calling Stop (a test timeout, a panic, kill
		// -9) the kernel shuts the server down instead of leaking it.
		Pdeathsig: syscall.SIGTERM,
	}
}
