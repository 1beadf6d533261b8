package mysqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"sync"

	gomysql "github.com/go-sql-driver/mysql"

	"gateway/mysql"
)

// The migrated schema, made once per test binary: the migrations run into a
// template database, whose tables' CREATE statements then make each test's
// database in one statement per table, several times faster than running
// every migration again. The template is the migrations' own result, so a
// test's database is exactly what they make.
var (
	schemaOnce sync.Once
	schema     struct {
		tables  []string // CREATE TABLE statements
		version int64    // the migrations' version, for schema_migrations
		err     error
	}
)

var autoIncrement = regexp.MustCompile(` AUTO_INCREMENT=\d+`)

// migratedSchema migrates a template database on the server at base once
// and reads its tables' definitions.
func migratedSchema(ctx context.Context, base string) error {
	schemaOnce.Do(func() { schema.err = readSchema(ctx, base) })
	return schema.err
}

func readSchema(ctx context.Context, base string) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "gwtmpl_" + hex.EncodeToString(b[:])
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		return fmt.Errorf("create the template database: %w", err)
	}
	defer func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`") }()
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		return err
	}
	cfg.DBName = name
	if err := mysql.MigrateUp(cfg.FormatDSN()); err != nil {
		return fmt.Errorf("migrate the template: %w", err)
	}
	var tables []string
	if err := admin.SelectContext(ctx, &tables, `SELECT table_name FROM information_schema.tables
WHERE table_schema = ? AND table_type = 'BASE TABLE' ORDER BY table_name`, name); err != nil {
		return err
	}
	for _, t := range tables {
		var tbl, ddl string
		if err := admin.QueryRowContext(ctx, "SHOW CREATE TABLE `"+name+"`.`"+t+"`").Scan(&tbl, &ddl); err != nil {
			return fmt.Errorf("read table %s: %w", t, err)
		}
		schema.tables = append(schema.tables, autoIncrement.ReplaceAllString(ddl, ""))
	}
	return admin.GetContext(ctx, &schema.version, "SELECT version FROM `"+name+"`.schema_migrations")
}

// createSchema makes the migrated schema's tables in database name.
func createSchema(ctx context.Context, base, name string) error {
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		return err
	}
	cfg.DBName = name
	db, err := mysql.Open(ctx, cfg.FormatDSN(), mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The tables are created in name order: a foreign key may name one
	// made after it.
	if _, err := conn.ExecContext(ctx, "SET SESSION foreign_key_checks = 0"); err != nil {
		return err
	}
	for _, ddl := range schema.tables {
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("%.60s…: %w", ddl, err)
		}
	}
	_, err = conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, dirty) VALUES (?, 0)", schema.version)
	return err
}
