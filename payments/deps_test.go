package payments_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The domain packages hold no SQL and reach storage only through the
// interfaces they declare: none of them may link a database driver, sqlx or
// the migration library, or an HTTP framework.
func TestDomainPackagesImportNoDriver(t *testing.T) {
	forbidden := []string{"github.com/go-sql-driver/mysql", "github.com/jmoiron/sqlx", "github.com/golang-migrate/migrate", "github.com/labstack/echo"}
	for _, pkg := range []string{"gateway/payments", "gateway/listings", "gateway/notices", "gateway/review", "gateway/idemkeys", "gateway/reconcile", "gateway/psp", "gateway/routing"} {
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
	// api is the only echo importer, and it too stays clear of the driver.
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "gateway/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps gateway/api: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden[:3] {
			if strings.HasPrefix(dep, f) {
				t.Errorf("gateway/api depends on %s", dep)
			}
		}
	}
}
