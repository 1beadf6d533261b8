package main

import (
	"bytes"
	"strings"
	"testing"
)

// A run's report names every package, shows a failure's whole output, and
// ends with each skipped test and the reason it gave.
func TestReport(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"run","Package":"gateway/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"gateway/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"pass","Package":"gateway/a","Test":"TestOK","Elapsed":0.01}`,
		`{"Action":"run","Package":"gateway/a","Test":"TestBrowser"}`,
		`{"Action":"output","Package":"gateway/a","Test":"TestBrowser","Output":"=== RUN   TestBrowser\n"}`,
		`{"Action":"output","Package":"gateway/a","Test":"TestBrowser","Output":"    b_test.go:9: Chromium is not installed: run make deps\n"}`,
		`{"Action":"output","Package":"gateway/a","Test":"TestBrowser","Output":"--- SKIP: TestBrowser (0.00s)\n"}`,
		`{"Action":"skip","Package":"gateway/a","Test":"TestBrowser","Elapsed":0}`,
		`{"Action":"output","Package":"gateway/a","Output":"ok  \tgateway/a\t0.1s\n"}`,
		`{"Action":"pass","Package":"gateway/a","Elapsed":0.1}`,
		`{"Action":"run","Package":"gateway/b","Test":"TestBroken"}`,
		`{"Action":"output","Package":"gateway/b","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}`,
		`{"Action":"output","Package":"gateway/b","Test":"TestBroken","Output":"    b_test.go:3: got 2 charges, want 1\n"}`,
		`{"Action":"fail","Package":"gateway/b","Test":"TestBroken","Elapsed":0.2}`,
		`{"Action":"fail","Package":"gateway/b","Elapsed":0.3}`,
		`{"Action":"skip","Package":"gateway/c"}`,
		`# gateway/d`,
	}, "\n")
	var out bytes.Buffer
	r := newReport(&out)
	r.read(strings.NewReader(stream))
	r.summary()
	got := out.String()
	for _, want := range []string{
		"ok   gateway/a\t0.1s\n",
		"--- FAIL: TestBroken (gateway/b, 0.20s)\n    b_test.go:3: got 2 charges, want 1\n",
		"FAIL gateway/b\t0.3s\n",
		"?    gateway/c\t[no test files]\n",
		"# gateway/d\n",
		"1 tests passed, 1 failed, 1 skipped",
		"Skipped:\n  a TestBrowser: b_test.go:9: Chromium is not installed: run make deps\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestOK") {
		t.Errorf("a passing test's output is shown:\n%s", got)
	}
	if r.failed != 1 {
		t.Errorf("failed = %d, want 1", r.failed)
	}
}

// The command's own status is testsum's; a failed test fails the run even
// when the command says nothing.
func TestRunStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"sh", "-c", `echo '{"Action":"fail","Package":"p","Test":"T"}'`}, &out, &errOut); code != 1 {
		t.Errorf("a failed test with status 0: exit %d, want 1", code)
	}
	if code := run([]string{"sh", "-c", "exit 3"}, &out, &errOut); code != 3 {
		t.Errorf("exit 3: testsum exits %d", code)
	}
	if code := run([]string{"sh", "-c", `echo '{"Action":"pass","Package":"p","Test":"T"}'`}, &out, &errOut); code != 0 {
		t.Errorf("a passing run: exit %d, want 0", code)
	}
}
