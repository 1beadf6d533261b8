package sdk_test

import (
	"bytes"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readmeExampleMaxLines keeps the client's README example a short read.
const readmeExampleMaxLines = 39

// TestREADMEExample: the complete checkout backend in clients/go/README.md
// is under 40 lines, gofmt-formatted, and builds and vets as a program of
// a merchant's own module (the client and go-sql-driver/mysql, from the
// module cache: nothing is downloaded).
func TestREADMEExample(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "clients", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src := exampleAfter(t, string(readme), "## A checkout backend")
	if n := strings.Count(src, "\n"); n > readmeExampleMaxLines {
		t.Errorf("the README's example is %d lines, at most %d", n, readmeExampleMaxLines)
	}
	if formatted, err := format.Source([]byte(src)); err != nil || !bytes.Equal(formatted, []byte(src)) {
		t.Errorf("the README's example is not gofmt-formatted (%v)", err)
	}

	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module readmeexample\n\ngo 1.26.8\n\nrequire (\n\tgateway/clients/go v0.0.0\n\tgithub.com/go-sql-driver/mysql v1.10.1\n)\n\n" +
		"replace gateway/clients/go => " + filepath.Join(root, "clients", "go") + "\n"
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goBin, "vet", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the README's example: %v\n%s\n%s", err, out, src)
	}
}

// exampleAfter is the first ```go block after heading.
func exampleAfter(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no heading %q", heading)
	}
	rest := doc[i:]
	start := strings.Index(rest, "\n```go\n")
	if start < 0 {
		t.Fatalf("no Go block after %q", heading)
	}
	rest = rest[start+len("\n```go\n"):]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		t.Fatal("an unclosed Go block")
	}
	return rest[:end+1]
}
