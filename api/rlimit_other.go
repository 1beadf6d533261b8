//go:build !unix

package api

// descriptorLimit is the process's limit on open files, 0 when unknown.
func descriptorLimit() int { return 0 }
