//go:build unix

package api

import "syscall"

// descriptorLimit is the process's limit on open files, 0 when unknown.
func descriptorLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return int(min(r.Cur, 1<<30))
}
