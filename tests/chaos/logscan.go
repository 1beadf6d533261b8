package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// logCounts is what the replicas' JSON logs say about fencing and about
// internal errors.
type logCounts struct {
	// fenced: "payments" counts workers refused by the fencing token after
	// the PSP call, "reconciler" the reconciler's fenced-out passes.
	fenced   map[string]int64
	internal map[string]int64 // error text (ids elided) → count
}

// idLike elides the ids and hashes in an error text, so that the same
// failure on different payments counts as one.
var idLike = regexp.MustCompile(`[0-9A-Za-z_]{16,}`)

// scanReplicaLogs reads every replica's log.
func scanReplicaLogs(rs []*replica) logCounts {
	lc := logCounts{fenced: map[string]int64{"payments": 0, "reconciler": 0}, internal: map[string]int64{}}
	for _, r := range rs {
		f, err := os.Open(r.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Msg     string `json:"msg"`
				Level   string `json:"level"`
				Outcome string `json:"outcome"`
				Code    string `json:"code"`
				Err     string `json:"err"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			switch {
			case l.Msg == "stale worker refused by fencing token":
				lc.fenced["payments"]++
			case l.Msg == "reconcile" && l.Outcome == "fenced":
				lc.fenced["reconciler"]++
			case l.Msg == "request failed" && (l.Code == "" || l.Code == "internal"):
				lc.internal[oneLine(idLike.ReplaceAllString(l.Err, "…"))]++
			}
		}
		f.Close()
	}
	return lc
}

// internalSummary lists the most frequent internal errors, most frequent first.
func (lc logCounts) internalSummary() []string {
	type kv struct {
		text string
		n    int64
	}
	var all []kv
	for t, n := range lc.internal {
		all = append(all, kv{t, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].text < all[j].text) })
	var out []string
	for _, e := range all[:min(len(all), 6)] {
		out = append(out, fmt.Sprintf("%d× %s", e.n, e.text))
	}
	return out
}

// oneLine joins the lines of a joined error.
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", " | ") }
