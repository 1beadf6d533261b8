package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// buildInfo is what this binary knows of its build: the module version the
// go command stamped from version control, the revision and the toolchain.
type buildInfo struct {
	Version      string `json:"version"`
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
	GoVersion    string `json:"go_version"`
	Platform     string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.RevisionTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionCmd is `gateway version`.
type versionCmd struct {
	JSON bool `name:"json" help:"print one JSON document instead of a line"`
}

func (c *versionCmd) Run(a *app) error {
	b := readBuildInfo()
	if c.JSON {
		return writeJSON(a.stdout, b)
	}
	line := "gateway " + b.Version
	if b.Revision != "" {
		line += " (revision " + b.Revision
		if b.Modified {
			line += ", modified"
		}
		if b.RevisionTime != "" {
			line += ", " + b.RevisionTime
		}
		line += ")"
	}
	fmt.Fprintf(a.stdout, "%s %s %s\n", line, b.GoVersion, b.Platform)
	return nil
}
