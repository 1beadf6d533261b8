package main

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"time"

	"gateway/mysql"
)

// migrateCmd is `gateway migrate`: the embedded schema migrations.
type migrateCmd struct {
	DB   dsnConfig `embed:""`
	JSON bool      `name:"json" help:"print one JSON document instead of text, and no progress"`

	Up      migrateUpCmd      `cmd:"" help:"Apply every pending migration."`
	Down    migrateDownCmd    `cmd:"" help:"Revert the most recent migration; asks first, since it may drop tables and their data."`
	Version migrateVersionCmd `cmd:"" help:"Show the schema version and whether this release can serve it."`
	Force   migrateForceCmd   `cmd:"" help:"Record VERSION as applied and clean without running anything: the way out of a dirty schema repaired by hand."`
}

func (c *migrateCmd) check() []error { return c.DB.require() }

// schemaReport is what every migrate command prints.
type schemaReport struct {
	Version uint `json:"version"`
	Dirty   bool `json:"dirty"`
	// Latest is this release's newest migration.
	Latest uint `json:"latest"`
	// State is current, behind, ahead or dirty.
	State    string          `json:"state"`
	Applied  []migrationStep `json:"applied"`
	Reverted []migrationStep `json:"reverted"`
}

type migrationStep struct {
	Version uint    `json:"version"`
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// run opens the migrator, lets act change the schema, and reports where it stands.
func (c *migrateCmd) run(a *app, act func(*mysql.Migrator) error) error {
	var rep schemaReport
	mg, err := c.migrator(a, &rep)
	if err != nil {
		return err
	}
	defer mg.Close()
	if err := act(mg); err != nil {
		return err
	}
	return c.finish(a, mg, &rep)
}

// migrator opens the migrator and reports its steps on a terminal.
func (c *migrateCmd) migrator(a *app, rep *schemaReport) (*mysql.Migrator, error) {
	mg, err := mysql.NewMigrator(c.DB.DSN)
	if err != nil {
		return nil, err
	}
	prog := a.progress(c.JSON)
	mg.Progress = func(s mysql.Step) {
		step := migrationStep{Version: s.Migration.Version, Name: s.Migration.Name, Seconds: s.Took.Seconds()}
		if s.Up {
			rep.Applied = append(rep.Applied, step)
		} else {
			rep.Reverted = append(rep.Reverted, step)
		}
		prog.linef("%s", stepLine(s))
	}
	return mg, nil
}

// stepLine is how a terminal is told of one migration.
func stepLine(s mysql.Step) string {
	verb := "reverted"
	if s.Up {
		verb = "applied "
	}
	return fmt.Sprintf("%s %06d_%s (%s)", verb, s.Migration.Version, s.Migration.Name, s.Took.Round(time.Millisecond))
}

// finish reads the version the command left and prints the report.
func (c *migrateCmd) finish(a *app, mg *mysql.Migrator, rep *schemaReport) error {
	v, dirty, err := mg.Version()
	if err != nil {
		return err
	}
	rep.Version, rep.Dirty, rep.Latest = v, dirty, mysql.LatestVersion()
	switch {
	case dirty:
		rep.State = "dirty"
	case v < rep.Latest:
		rep.State = "behind"
	case v > rep.Latest:
		rep.State = "ahead"
	default:
		rep.State = "current"
	}
	if rep.Applied == nil {
		rep.Applied = []migrationStep{}
	}
	if rep.Reverted == nil {
		rep.Reverted = []migrationStep{}
	}
	if c.JSON {
		return writeJSON(a.stdout, rep)
	}
	fmt.Fprintf(a.stdout, "schema version %d (%s)\n", v, map[string]string{
		"current": "current: this release's latest",
		"behind":  fmt.Sprintf("behind this release's %d: run gateway migrate up", rep.Latest),
		"ahead":   fmt.Sprintf("ahead of this release's %d: a newer release migrated it; this one still serves", rep.Latest),
		"dirty":   fmt.Sprintf("dirty: migration %d failed halfway; repair it by hand, then gateway migrate force %d (completed) or %d (not), and gateway migrate up", v, v, max(v, 1)-1),
	}[rep.State])
	return nil
}

type migrateUpCmd struct{}

func (*migrateUpCmd) Run(a *app, c *migrateCmd) error {
	return c.run(a, func(mg *mysql.Migrator) error {
		if v, _, err := mg.Version(); err == nil && v < mysql.LatestVersion() {
			a.progress(c.JSON).linef("migrating %s from version %d to %d", maskDSN(c.DB.DSN), v, mysql.LatestVersion())
		}
		return mg.Up()
	})
}

type migrateDownCmd struct {
	Yes bool `name:"yes" short:"y" help:"revert without asking"`
}

func (d *migrateDownCmd) Run(a *app, c *migrateCmd) error {
	return c.run(a, func(mg *mysql.Migrator) error { return d.revert(a, c, mg) })
}

func (d *migrateDownCmd) revert(a *app, c *migrateCmd, mg *mysql.Migrator) error {
	v, dirty, err := mg.Version()
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("nothing to revert: no migration is applied to %s", maskDSN(c.DB.DSN))
	}
	if dirty {
		return fmt.Errorf("schema version %d is dirty; repair it and record it with gateway migrate force first", v)
	}
	what := fmt.Sprintf("migrate down reverts migration %d", v)
	if m, ok := mysql.FindMigration(v); ok {
		what = fmt.Sprintf("migrate down reverts migration %06d_%s", v, m.Name)
		switch tables := droppedTables(m.Down); len(tables) {
		case 0:
		case 1:
			what += ", which drops table " + tables[0] + " with every row in it"
		default:
			what += ", which drops tables " + strings.Join(tables[:len(tables)-1], ", ") + " and " + tables[len(tables)-1] + " with every row in them"
		}
	}
	what += " on " + maskDSN(c.DB.DSN)
	if !d.Yes {
		if err := a.confirm(what); err != nil {
			return err
		}
	}
	return mg.Down()
}

type migrateVersionCmd struct{}

func (*migrateVersionCmd) Run(a *app, c *migrateCmd) error {
	return c.run(a, func(*mysql.Migrator) error { return nil })
}

type migrateForceCmd struct {
	Version uint `arg:"" name:"version" help:"the version to record: the last migration that is completely applied (0: none)"`
}

func (f *migrateForceCmd) check() []error {
	if latest := mysql.LatestVersion(); f.Version > latest {
		return []error{fmt.Errorf("VERSION %d is not a migration of this release, which knows 0 to %d", f.Version, latest)}
	}
	return nil
}

func (f *migrateForceCmd) Run(a *app, c *migrateCmd) error {
	return c.run(a, func(mg *mysql.Migrator) error { return mg.Force(f.Version) })
}

var dropTable = regexp.MustCompile("(?i)DROP\\s+TABLE\\s+(?:IF\\s+EXISTS\\s+)?`?(\\w+)`?")

// droppedTables names the tables a down migration drops, for the confirmation.
func droppedTables(sql string) []string {
	var out []string
	for _, m := range dropTable.FindAllStringSubmatch(sql, -1) {
		out = append(out, m[1])
	}
	return out
}

// confirm asks on a terminal; elsewhere it refuses, naming --yes.
func (a *app) confirm(what string) error {
	if !a.terminal(a.stdin) {
		return usageError{what + "; pass --yes to confirm (no terminal to ask on)"}
	}
	fmt.Fprintf(a.stderr, "%s.\nType yes to go on: ", what)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return fmt.Errorf("not confirmed; nothing was changed")
	}
	return nil
}
