package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	mysqlmigrate "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migration is one embedded schema migration.
type Migration struct {
	Version uint
	Name    string
	// Down is the SQL that reverts it.
	Down string
}

// migrationFile is golang-migrate's naming: NNN_name.up.sql, NNN_name.down.sql.
var migrationFile = regexp.MustCompile(`^([0-9]+)_(.+)\.(up|down)\.sql$`)

// Migrations lists the embedded migrations, oldest first.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("mysql: migrations: %w", err)
	}
	byVersion := map[uint]*Migration{}
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("mysql: migration file %q is not NNN_name.up|down.sql", e.Name())
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("mysql: migration file %q: %w", e.Name(), err)
		}
		mig := byVersion[uint(v)]
		if mig == nil {
			mig = &Migration{Version: uint(v), Name: m[2]}
			byVersion[uint(v)] = mig
		}
		if m[3] == "down" {
			b, err := migrations.ReadFile("migrations/" + e.Name())
			if err != nil {
				return nil, fmt.Errorf("mysql: migration file %q: %w", e.Name(), err)
			}
			mig.Down = string(b)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version) - int(b.Version) })
	return out, nil
}

// LatestVersion is the schema version this binary needs: its newest migration.
func LatestVersion() uint {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0 // the embedded files are checked by the tests
	}
	return ms[len(ms)-1].Version
}

// Step is one migration applied or reverted, for progress reports.
type Step struct {
	Migration Migration
	Up        bool
	Took      time.Duration
}

// Migrator applies the embedded schema migrations.
type Migrator struct {
	m *migrate.Migrate
	// Progress, when set, is told about each migration once it is applied or reverted.
	Progress func(Step)
}

// NewMigrator opens its own connection to dsn (migration files may hold
// several statements, which the serving pool never allows).
func NewMigrator(dsn string) (*Migrator, error) {
	cfg, err := Config(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MultiStatements = true
	if cfg.Timeout == 0 {
		cfg.Timeout = DialTimeout // a migration may run long; reaching the server may not
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	sdb := sql.OpenDB(conn)
	drv, err := mysqlmigrate.WithInstance(sdb, &mysqlmigrate.Config{})
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	return &Migrator{m: m}, nil
}

// Up applies every pending migration; an up-to-date schema is not an error.
// It applies them one at a time, each under the migration lock, so that
// Progress hears of each and concurrent migrators never apply one twice.
func (mg *Migrator) Up() error {
	for {
		start := time.Now()
		err := mg.m.Steps(1)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, migrate.ErrNoChange) {
			return nil // nothing left to apply
		}
		if err != nil {
			return fmt.Errorf("mysql: migrate up: %w", err)
		}
		if err := mg.report(true, time.Since(start)); err != nil {
			return err
		}
	}
}

// Down reverts the most recent migration.
func (mg *Migrator) Down() error {
	v, _, err := mg.Version()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := mg.m.Steps(-1); err != nil {
		return fmt.Errorf("mysql: migrate down: %w", err)
	}
	mig, _ := FindMigration(v)
	if mg.Progress != nil {
		mg.Progress(Step{Migration: mig, Up: false, Took: time.Since(start)})
	}
	return nil
}

// Force records version as applied and clean without running anything: the
// way out of a dirty schema after it was repaired by hand. 0 records that no
// migration is applied.
func (mg *Migrator) Force(version uint) error {
	v := int(version)
	if version == 0 {
		v = database.NilVersion
	}
	if err := mg.m.Force(v); err != nil {
		return fmt.Errorf("mysql: migrate force %d: %w", version, err)
	}
	return nil
}

// report tells Progress about the migration now applied.
func (mg *Migrator) report(up bool, took time.Duration) error {
	if mg.Progress == nil {
		return nil
	}
	v, _, err := mg.Version()
	if err != nil {
		return err
	}
	mig, _ := FindMigration(v)
	mg.Progress(Step{Migration: mig, Up: up, Took: took})
	return nil
}

// FindMigration finds an embedded migration by version; one not embedded
// has only its version.
func FindMigration(v uint) (Migration, bool) {
	ms, err := Migrations()
	if err != nil {
		return Migration{Version: v}, false
	}
	for _, m := range ms {
		if m.Version == v {
			return m, true
		}
	}
	return Migration{Version: v}, false
}

// Version reports the applied schema version; 0 means none.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	v, d, err := mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("mysql: migrate version: %w", err)
	}
	return v, d, nil
}

// Close releases the migrator's connection.
func (mg *Migrator) Close() error {
	serr, derr := mg.m.Close()
	return errors.Join(serr, derr)
}

// MigrateUp is the common case: bring the schema at dsn up to date.
func MigrateUp(dsn string) error {
	mg, err := NewMigrator(dsn)
	if err != nil {
		return err
	}
	return errors.Join(mg.Up(), mg.Close())
}

// SchemaError says why a database's schema cannot serve this binary.
type SchemaError struct {
	// Version is the applied version (0: none); Dirty means that migration
	// failed halfway.
	Version uint
	Dirty   bool
	// Want is the version this binary needs.
	Want uint
}

func (e *SchemaError) Error() string {
	if e.Dirty {
		return fmt.Sprintf("db: schema version %d is dirty: that migration failed halfway", e.Version)
	}
	return fmt.Sprintf("db: schema version %d is behind this release, which needs %d", e.Version, e.Want)
}

// RowQueryer runs a query that returns at most one row; *sql.DB and *sqlx.DB are ones.
type RowQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SchemaVersion reads the applied version from golang-migrate's table
// without a migrator (and its lock): cheap enough for every readiness probe.
// A database that was never migrated is at version 0.
func SchemaVersion(ctx context.Context, q RowQueryer) (version uint, dirty bool, err error) {
	var v int64
	err = q.QueryRowContext(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&v, &dirty)
	var me *gomysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case errors.As(err, &me) && me.Number == 1146: // no such table: never migrated
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("mysql: schema version: %w", Classify(err))
	case v < 0:
		return 0, dirty, nil
	}
	return uint(v), dirty, nil
}

// CheckSchema returns a *SchemaError unless the schema is clean and at least
// at this binary's version. A newer schema is fine: migrations only add, so
// the release before a migration keeps serving while the next one rolls out.
func CheckSchema(ctx context.Context, q RowQueryer) error {
	v, dirty, err := SchemaVersion(ctx, q)
	if err != nil {
		return err
	}
	if want := LatestVersion(); dirty || v < want {
		return &SchemaError{Version: v, Dirty: dirty, Want: want}
	}
	return nil
}
