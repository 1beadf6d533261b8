package db

import (
	"embed"
	"errors"
	"fmt"

	"database/sql"
	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	mysqlmigrate "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrator applies the embedded schema migrations.
type Migrator struct {
	m *migrate.Migrate
}

// NewMigrator opens its own connection to dsn (migration files may hold
// several statements, which the serving pool never allows).
func NewMigrator(dsn string) (*Migrator, error) {
	cfg, err := Config(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MultiStatements = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("db: %w", err)
	}
	sdb := sql.OpenDB(conn)
	drv, err := mysqlmigrate.WithInstance(sdb, &mysqlmigrate.Config{})
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("db: migrate: %w", err)
	}
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("db: migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("db: migrate: %w", err)
	}
	return &Migrator{m: m}, nil
}

// Up applies every pending migration; an up-to-date schema is not an error.
func (mg *Migrator) Up() error {
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("db: migrate up: %w", err)
	}
	return nil
}

// Down reverts the most recent migration.
func (mg *Migrator) Down() error {
	if err := mg.m.Steps(-1); err != nil {
		return fmt.Errorf("db: migrate down: %w", err)
	}
	return nil
}

// Version reports the applied schema version; 0 means none.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	v, d, err := mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("db: migrate version: %w", err)
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
