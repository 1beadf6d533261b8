package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

func schemaVersion(t *testing.T, getenv func(string) string) schemaReport {
	t.Helper()
	out, _, err := runCmd(t, getenv, "migrate", "version", "--json")
	if err != nil {
		t.Fatalf("migrate version: %v", err)
	}
	var rep schemaReport
	decodeOne(t, out, &rep)
	return rep
}

func TestMigrateCommands(t *testing.T) {
	dbx := mysqltest.MustOpen(t) // migrated
	dsn := mysqltest.DSNOf(t, dbx)
	getenv := env("GATEWAY_DATABASE_DSN", dsn)
	latest := mysql.LatestVersion()

	out, _, err := runCmd(t, getenv, "migrate", "version")
	if err != nil || out != fmt.Sprintf("schema version %d (current: this release's latest)\n", latest) {
		t.Fatalf("version: %v %q", err, out)
	}
	out, _, err = runCmd(t, getenv, "migrate", "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	decodeOne(t, out, &doc)
	wantKeys(t, "migrate --json", doc, "version", "dirty", "latest", "state", "applied", "reverted")

	// down asks; without a terminal to ask on it refuses and changes nothing.
	_, _, err = runCmd(t, getenv, "migrate", "down")
	newest, _ := mysql.FindMigration(latest)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--yes") || !strings.Contains(err.Error(), fmt.Sprintf("%06d_%s", latest, newest.Name)) {
		t.Fatalf("down without --yes: %v", err)
	}
	if v := schemaVersion(t, getenv).Version; v != latest {
		t.Fatalf("down without --yes reverted: version %d", v)
	}
	// On a terminal, anything but "yes" keeps the schema.
	a, _, stderr := testApp(getenv, "no\n", true)
	if err := a.run(context.Background(), []string{"migrate", "down"}); exitCode(err) != exitError || !strings.Contains(stderr.String(), "Type yes") {
		t.Fatalf("down answered no: %v, stderr %q", err, stderr)
	}
	if v := schemaVersion(t, getenv).Version; v != latest {
		t.Fatalf("down answered no reverted: version %d", v)
	}
	// "yes" reverts, and the terminal sees the progress.
	a, stdout, stderr := testApp(getenv, "yes\n", true)
	if err := a.run(context.Background(), []string{"migrate", "down"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("reverted %06d_", latest)) || !strings.Contains(stdout.String(), "behind this release") {
		t.Fatalf("down: stdout %q, stderr %q", stdout, stderr)
	}
	rep := schemaVersion(t, getenv)
	if rep.Version != latest-1 || rep.State != "behind" {
		t.Fatalf("after down: %+v", rep)
	}
	// The audit table goes with migration 3: the confirmation says so.
	for v := latest - 1; v > 3; v-- {
		if _, _, err := runCmd(t, getenv, "migrate", "down", "--yes"); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = runCmd(t, getenv, "migrate", "down")
	if err == nil || !strings.Contains(err.Error(), "drops table payment_resolutions with every row in it") {
		t.Fatalf("down of the audit table's migration: %v", err)
	}

	if _, _, err := runCmd(t, getenv, "migrate", "down", "--yes"); err != nil {
		t.Fatal(err)
	}

	// up on a terminal shows each migration; --json stays quiet and lists them.
	a, stdout, stderr = testApp(getenv, "", true)
	if err := a.run(context.Background(), []string{"migrate", "up", "--json"}); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 {
		t.Errorf("--json printed progress: %q", stderr)
	}
	decodeOne(t, stdout.String(), &rep)
	if rep.Version != latest || len(rep.Applied) != int(latest-2) || rep.Applied[0].Version != 3 || rep.Applied[0].Name != "reconcile" {
		t.Fatalf("up --json: %+v", rep)
	}

	// force repairs the record of a dirty schema, and refuses versions this release does not know.
	if _, err := dbx.Exec(`UPDATE schema_migrations SET dirty = 1`); err != nil {
		t.Fatal(err)
	}
	if rep := schemaVersion(t, getenv); !rep.Dirty || rep.State != "dirty" {
		t.Fatalf("dirty: %+v", rep)
	}
	out, _, err = runCmd(t, getenv, "migrate", "force", fmt.Sprint(latest))
	if err != nil || !strings.HasPrefix(out, fmt.Sprintf("schema version %d (current", latest)) {
		t.Fatalf("force: %v %q", err, out)
	}
	if _, _, err := runCmd(t, getenv, "migrate", "force", fmt.Sprint(latest+1)); exitCode(err) != exitUsage {
		t.Fatalf("force beyond this release: %v", err)
	}
}
