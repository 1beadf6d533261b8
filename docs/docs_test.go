package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines keeps the README a landing page; detail belongs in docs/.
const readmeMaxLines = 250

// designDoc is the design document that "design §N" citations point into.
const designDoc = "docs/design.md"

// TestREADMEIsShort fails when the README outgrows a landing page.
func TestREADMEIsShort(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(data); n > readmeMaxLines {
		t.Errorf("README.md:%d: %d lines, at most %d: move the detail into a page of docs/ and link to it", readmeMaxLines+1, n, readmeMaxLines)
	}
}

// TestLinks fails on every relative link of README.md, CONTRIBUTING.md and
// docs/*.md whose file or folder does not exist, and on every anchor that no
// heading of its target produces the way GitHub names headings.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	files := []string{"README.md", "CONTRIBUTING.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	anchors := anchorCache{root: root, byFile: map[string]map[string]bool{}}
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if errors.Is(err, fs.ErrNotExist) && f != "README.md" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		doc := parseMarkdown(string(data))
		for _, l := range doc.links {
			checked++
			if problem := checkLink(root, f, l.target, &anchors); problem != "" {
				t.Errorf("%s:%d: link %q: %s", f, l.line, l.target, problem)
			}
		}
	}
	if checked == 0 {
		t.Error("no links found: is the parser broken?")
	}
}

// TestDesignCitations fails when a tracked file cites "design §N" (or
// "design.md §N", or "design §7 and §14") for a section docs/design.md lacks.
func TestDesignCitations(t *testing.T) {
	root := repoRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: cannot list the tracked files whose design citations this test checks")
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("git ls-files in %s: %v (not a git checkout?): cannot list the tracked files to check", root, err)
	}
	design, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(designDoc)))
	if err != nil {
		t.Fatal(err)
	}
	sections := designSections(string(design))
	if len(sections) == 0 {
		t.Fatalf("%s has no numbered sections (## N. Title)", designDoc)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" || f == designDoc {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			continue // listed in the index but not in the working tree (being moved, or deleted)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, n := range citations(line) {
				if !sections[n] {
					t.Errorf("%s:%d: cites design §%s, but %s has no section \"## %s.\"", f, i+1, n, designDoc, n)
				}
			}
		}
	}
}

func TestSlugs(t *testing.T) {
	for _, c := range []struct {
		headings []string
		want     []string
	}{
		{[]string{"Quick start"}, []string{"quick-start"}},
		{[]string{"`POST /payments`"}, []string{"post-payments"}},
		{[]string{"What each answer means (for client teams)"}, []string{"what-each-answer-means-for-client-teams"}},
		{[]string{"`GET /payments/{id}` and `GET /payments?idempotency_key=K`"}, []string{"get-paymentsid-and-get-paymentsidempotency_keyk"}},
		{[]string{"7. Invariants"}, []string{"7-invariants"}},
		{[]string{"Stripe's own mock"}, []string{"stripes-own-mock"}},
		{[]string{"A — B"}, []string{"a--b"}},
		{[]string{"See [the API](api.md)"}, []string{"see-the-api"}},
		{[]string{"Notes", "Notes", "Notes-1"}, []string{"notes", "notes-1", "notes-1-1"}},
		{[]string{"Café", "Über 2"}, []string{"café", "über-2"}},
	} {
		s := slugger{}
		for i, h := range c.headings {
			if got := s.slug(h); got != c.want[i] {
				t.Errorf("slug(%q) = %q, want %q", h, got, c.want[i])
			}
		}
	}
}

func TestCitationsParse(t *testing.T) {
	sec := "§" // split so that this file cites nothing itself
	for _, c := range []struct {
		line string
		want []string
	}{
		{"// every time is the database's (design " + sec + "14).", []string{"14"}},
		{"see design.md " + sec + "3", []string{"3"}},
		{"design " + sec + "7 and " + sec + "14", []string{"7", "14"}},
		{"design " + sec + "7.1 and " + sec + "11", []string{"7", "11"}},
		{"design " + sec + "7, " + sec + "8 or " + sec + "99", []string{"7", "8", "99"}},
		{"design " + sec + "7's invariants; " + sec + "3 of the protocol", []string{"7"}},
		{"Design" + sec + "2", []string{"2"}},
		{"protocol " + sec + "3 as written", nil},
		{"designer " + sec + "4", nil},
	} {
		if got := citations(c.line); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("citations(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}

func TestParseMarkdown(t *testing.T) {
	doc := parseMarkdown("# Title\n" +
		"See [a](a.md) and ![pic](b.png), `[not](code.md)`.\n" +
		"```sh\n[inside](fence.md)\n## Not a heading\n```\n" +
		"~~~\n[tilde](fence.md)\n~~~\n" +
		"## Section two ##\n" +
		"[ref]: c.md#x \"title\"\n" +
		"<a id=\"custom\"></a> [web](https://example.com)\n")
	var targets []string
	for _, l := range doc.links {
		targets = append(targets, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := "2:a.md,2:b.png,11:c.md#x,12:https://example.com"; strings.Join(targets, ",") != want {
		t.Errorf("links = %q, want %s", targets, want)
	}
	for _, a := range []string{"title", "section-two", "custom"} {
		if !doc.anchors[a] {
			t.Errorf("anchor %q missing from %v", a, doc.anchors)
		}
	}
	if doc.anchors["not-a-heading"] {
		t.Error("a heading inside a fence made an anchor")
	}
}

// repoRoot is the directory of the repository's go.mod, found by walking up
// from the package's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod in any directory above the docs package")
		}
		dir = parent
	}
}

func countLines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

type mdLink struct {
	line   int
	target string
}

type markdown struct {
	links   []mdLink
	anchors map[string]bool
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	closingRE  = regexp.MustCompile(`(?:^|[ \t]+)#+$`)
	setextRE   = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	inlineRE   = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	refDefRE   = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	htmlIDRE   = regexp.MustCompile(`<a\s[^>]*(?:name|id)="([^"]+)"`)
	htmlTagRE  = regexp.MustCompile(`<[^>]*>`)
	mdLinkRE   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	schemeRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	sectionRE  = regexp.MustCompile(`^## (\d+)\.`)
	citationRE = regexp.MustCompile(`(?i)\bdesign(?:\.md)?(?:'s)?[ \t]*§[ \t]*(\d+)`)
	moreRE     = regexp.MustCompile(`^(?:\.\d+)*(?:[ \t]*,[ \t]*|[ \t]+and[ \t]+|[ \t]+or[ \t]+|[ \t]*[–-][ \t]*|[ \t]*/[ \t]*|[ \t]*&[ \t]*)§[ \t]*(\d+)`)
)

// parseMarkdown finds the links outside fenced code blocks and code spans, and
// the anchors of the headings (and HTML ids) as GitHub renders them.
func parseMarkdown(text string) markdown {
	doc := markdown{anchors: map[string]bool{}}
	s := slugger{}
	var fence string // the opening fence's run of ` or ~, while inside one
	prev := ""       // the previous line outside fences, for setext headings
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(strings.TrimSpace(trimmed), fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if run := fenceRun(trimmed); run != "" {
			fence = run
			prev = ""
			continue
		}
		switch m := headingRE.FindStringSubmatch(line); {
		case m != nil:
			doc.anchors[s.slug(closingRE.ReplaceAllString(m[2], ""))] = true
		case setextRE.MatchString(line) && isParagraph(prev):
			doc.anchors[s.slug(strings.TrimSpace(prev))] = true
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			doc.anchors[m[1]] = true
		}
		visible := blankCodeSpans(line)
		for _, m := range inlineRE.FindAllStringSubmatch(visible, -1) {
			doc.links = append(doc.links, mdLink{line: i + 1, target: m[1]})
		}
		if m := refDefRE.FindStringSubmatch(visible); m != nil {
			doc.links = append(doc.links, mdLink{line: i + 1, target: m[1]})
		}
		prev = line
	}
	return doc
}

// fenceRun is the run of three or more backticks or tildes that opens a fenced
// code block, or "".
func fenceRun(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		n := len(trimmed) - len(strings.TrimLeft(trimmed, c))
		if n >= 3 {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// isParagraph tells whether a setext underline below line would make it a
// heading (rather than a table, a list item or nothing).
func isParagraph(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || headingRE.MatchString(line) {
		return false
	}
	switch t[0] {
	case '|', '-', '*', '+', '>', '#', '<':
		return false
	}
	return !regexp.MustCompile(`^\d+[.)]\s`).MatchString(t)
}

// blankCodeSpans replaces each code span (a run of n backticks up to the next
// run of exactly n) with spaces, so that what it shows is never taken for a link.
func blankCodeSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		n, end := j-i, -1
		for k := j; k < len(b); {
			if b[k] != '`' {
				k++
				continue
			}
			m := k
			for m < len(b) && b[m] == '`' {
				m++
			}
			if m-k == n {
				end = m
				break
			}
			k = m
		}
		if end < 0 {
			i = j
			continue
		}
		for x := i; x < end; x++ {
			b[x] = ' '
		}
		i = end
	}
	return string(b)
}

// slugger names headings as GitHub does: lower case, spaces to "-", every
// other character but letters, digits, "-" and "_" dropped, and a repeated
// name numbered "-1", "-2", ….
type slugger struct{ seen map[string]int }

func (s *slugger) slug(heading string) string {
	if s.seen == nil {
		s.seen = map[string]int{}
	}
	text := mdLinkRE.ReplaceAllString(heading, "$1")
	text = htmlTagRE.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	base := b.String()
	result := base
	for {
		if _, dup := s.seen[result]; !dup {
			break
		}
		s.seen[base]++
		result = fmt.Sprintf("%s-%d", base, s.seen[base])
	}
	s.seen[result] = 0
	return result
}

// anchorCache holds the anchors of each Markdown file a link points into.
type anchorCache struct {
	root   string
	byFile map[string]map[string]bool
}

func (c *anchorCache) of(file string) (map[string]bool, error) {
	if a, ok := c.byFile[file]; ok {
		return a, nil
	}
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	a := parseMarkdown(string(data)).anchors
	c.byFile[file] = a
	return a, nil
}

// checkLink says what is wrong with target, linked from the file from (both
// relative to root, slash-separated), or "" when nothing is.
func checkLink(root, from, target string, anchors *anchorCache) string {
	if target == "" {
		return "empty target"
	}
	if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // http(s), mailto and the like are not checked
	}
	p, frag, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("bad escape in the path: %v", err)
	}
	if frag, err = url.PathUnescape(frag); err != nil {
		return fmt.Sprintf("bad escape in the anchor: %v", err)
	}
	file := from
	switch {
	case p == "":
	case strings.HasPrefix(p, "/"):
		file = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		file = path.Join(path.Dir(from), p)
	}
	if file == ".." || strings.HasPrefix(file, "../") {
		return "points outside the repository"
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return fmt.Sprintf("%s: no such file or folder", file)
	}
	if frag == "" {
		return ""
	}
	if info.IsDir() {
		file = path.Join(file, "README.md")
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
			return fmt.Sprintf("anchor #%s into a folder without a README.md", frag)
		}
	}
	if !strings.HasSuffix(strings.ToLower(file), ".md") {
		return "" // line anchors and the like into other files are GitHub's business
	}
	a, err := anchors.of(file)
	if err != nil {
		return err.Error()
	}
	if !a[frag] {
		return fmt.Sprintf("no heading of %s has the anchor #%s (anchors there: %s)", file, frag, list(a))
	}
	return ""
}

func list(set map[string]bool) string {
	var s []string
	for k := range set {
		s = append(s, "#"+k)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// designSections is the set of section numbers N with a heading "## N." in
// the design document.
func designSections(text string) map[string]bool {
	sections := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRun(strings.TrimLeft(line, " \t")) != "" {
			inFence = !inFence
			continue
		}
		if m := sectionRE.FindStringSubmatch(line); m != nil && !inFence {
			sections[m[1]] = true
		}
	}
	return sections
}

// citations is every section number a line cites as the design's: "design §7",
// "design.md §7", and each "§N" listed after it ("design §7 and §14",
// "design §7.1, §11").
func citations(line string) []string {
	var out []string
	for _, loc := range citationRE.FindAllStringSubmatchIndex(line, -1) {
		out = append(out, line[loc[2]:loc[3]])
		rest := line[loc[1]:]
		for {
			m := moreRE.FindStringSubmatchIndex(rest)
			if m == nil {
				break
			}
			out = append(out, rest[m[2]:m[3]])
			rest = rest[m[1]:]
		}
	}
	return out
}
