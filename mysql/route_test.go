package mysql_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"vitess.io/vitess/go/vt/sqlparser"
)

// How a statement would be routed if the database were sharded by merchant
// as deploy/vitess/vschema.gateway.json says: worked out from the statement
// parsed by Vitess's own SQL parser, so that what counts as single-shard
// here is what Vitess would see.

// vschemaFile and migrationsDir are relative to this package's directory.
const (
	vschemaFile       = "../deploy/vitess/vschema.gateway.json"
	lookupVSchemaFile = "../deploy/vitess/vschema.gateway_lookup.json"
	lookupSchemaFile  = "../deploy/vitess/lookup.sql"
	migrationsDir     = "migrations"
)

// vschema is the part of a Vitess VSchema the checks read.
type vschema struct {
	Sharded  bool `json:"sharded"`
	Vindexes map[string]struct {
		Type   string            `json:"type"`
		Params map[string]string `json:"params"`
		Owner  string            `json:"owner"`
	} `json:"vindexes"`
	Tables map[string]struct {
		ColumnVindexes []struct {
			Column string `json:"column"`
			Name   string `json:"name"`
		} `json:"column_vindexes"`
	} `json:"tables"`
}

func loadVSchema(tb testing.TB, path string) vschema {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var vs vschema
	if err := json.Unmarshal(b, &vs); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return vs
}

// shardColumns maps each table of the sharded keyspace to the column of its
// primary vindex (the first one): the column whose value picks the shard.
func (vs vschema) shardColumns() map[string]string {
	out := map[string]string{}
	for name, t := range vs.Tables {
		if len(t.ColumnVindexes) > 0 {
			out[name] = t.ColumnVindexes[0].Column
		}
	}
	return out
}

func newParser(tb testing.TB) *sqlparser.Parser {
	tb.Helper()
	p, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: "8.0.40"})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// route is what a statement needs of the shards.
type route struct {
	verb   string   // SELECT, INSERT, UPDATE, DELETE, or the kind of any other statement
	tables []string // the keyspace's tables it names, in order
	// scattered says, for each table the statement does not pin to one
	// shard, why not; empty: single-shard (or no table at all).
	scattered []string
	// multiTable: an UPDATE or DELETE of several tables, refused everywhere.
	multiTable bool
	// pinned lists every table.column the statement fixes to one value by
	// an equality (what a lookup vindex could route on).
	pinned map[string]bool
}

func (r route) singleShard() bool { return len(r.scattered) == 0 }

// routeOf parses sql and works out its route against the shard columns.
func routeOf(p *sqlparser.Parser, sql string, shardCols map[string]string) (route, error) {
	stmt, err := p.Parse(sql)
	if err != nil {
		return route{}, err
	}
	a := &analysis{shardCols: shardCols, r: route{pinned: map[string]bool{}}}
	switch s := stmt.(type) {
	case *sqlparser.Select, *sqlparser.Union:
		a.r.verb = "SELECT"
		a.tableStatement(s.(sqlparser.TableStatement))
	case *sqlparser.Update:
		a.r.verb = "UPDATE"
		a.scope(s.TableExprs, s.Where, s)
		a.singleTable()
	case *sqlparser.Delete:
		a.r.verb = "DELETE"
		a.scope(s.TableExprs, s.Where, s)
		a.singleTable()
	case *sqlparser.Insert:
		a.r.verb = "INSERT"
		a.insert(s)
	default:
		// SHOW, SET and the like name none of the keyspace's tables.
		a.r.verb = strings.TrimPrefix(fmt.Sprintf("%T", stmt), "*sqlparser.")
	}
	return a.r, nil
}

type analysis struct {
	shardCols map[string]string
	r         route
}

func (a *analysis) scatter(format string, args ...any) {
	a.r.scattered = append(a.r.scattered, fmt.Sprintf(format, args...))
}

// singleTable refuses a write to several tables in one statement (UPDATE
// … JOIN …): MariaDB 10.11 has crashed on them under load, and a short
// transaction of single-table statements does the same work.
func (a *analysis) singleTable() {
	if len(a.r.tables) > 1 {
		a.r.multiTable = true
		a.scatter("a multi-table %s (%s): write each table with its own statement, in one transaction",
			a.r.verb, strings.Join(a.r.tables, ", "))
	}
}

func (a *analysis) tableStatement(ts sqlparser.TableStatement) {
	switch s := ts.(type) {
	case *sqlparser.Select:
		a.scope(s.From, s.Where, s)
	case *sqlparser.Union:
		a.tableStatement(s.Left)
		a.tableStatement(s.Right)
	default:
		a.scatter("%T not analysed", ts)
	}
}

// member is one table of a FROM (or an UPDATE's or DELETE's table list).
type member struct {
	alias, table string
}

// scope checks one SELECT, UPDATE or DELETE: every table it names must be
// pinned to one merchant, by an equality of its shard column with a value
// in the WHERE or the join conditions, or by a join equality with the shard
// column of a table that is.
func (a *analysis) scope(from []sqlparser.TableExpr, where *sqlparser.Where, node sqlparser.SQLNode) {
	var members []member
	var conds []sqlparser.Expr
	for _, te := range from {
		a.collect(te, &members, &conds)
	}
	if where != nil {
		conds = append(conds, where.Expr)
	}
	// Subqueries are scopes of their own.
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		if n == node {
			return true, nil
		}
		switch s := n.(type) {
		case *sqlparser.Subquery:
			a.tableStatement(s.Select)
			return false, nil
		case *sqlparser.DerivedTable:
			a.tableStatement(s.Select)
			return false, nil
		}
		return true, nil
	}, node)
	if len(members) == 0 {
		return
	}
	byAlias := map[string]member{}
	for _, m := range members {
		byAlias[m.alias] = m
	}
	// resolve names the member a column belongs to: by its qualifier, or the
	// only member; an unqualified column of a join is not guessed.
	resolve := func(c *sqlparser.ColName) (member, bool) {
		if q := c.Qualifier.Name.String(); q != "" {
			m, ok := byAlias[q]
			return m, ok
		}
		if len(members) == 1 {
			return members[0], true
		}
		return member{}, false
	}
	// Union-find over the members; "" is the set of those pinned to a value.
	parent := map[string]string{"": ""}
	for _, m := range members {
		parent[m.alias] = m.alias
	}
	var find func(string) string
	find = func(x string) string {
		if parent[x] != x {
			parent[x] = find(parent[x])
		}
		return parent[x]
	}
	union := func(x, y string) { parent[find(x)] = find(y) }
	isShardCol := func(m member, c *sqlparser.ColName) bool {
		return c.Name.EqualString(a.shardCols[m.table])
	}
	for _, cond := range conds {
		for _, e := range conjuncts(cond) {
			cmp, ok := e.(*sqlparser.ComparisonExpr)
			if !ok || cmp.Operator != sqlparser.EqualOp {
				continue
			}
			lc, lok := cmp.Left.(*sqlparser.ColName)
			rc, rok := cmp.Right.(*sqlparser.ColName)
			switch {
			case lok && rok:
				lm, ok1 := resolve(lc)
				rm, ok2 := resolve(rc)
				if ok1 && ok2 && isShardCol(lm, lc) && isShardCol(rm, rc) {
					union(lm.alias, rm.alias)
				}
			case lok && isValue(cmp.Right), rok && isValue(cmp.Left):
				c := lc
				if !lok {
					c = rc
				}
				if m, ok := resolve(c); ok {
					a.r.pinned[m.table+"."+c.Name.String()] = true
					if isShardCol(m, c) {
						union(m.alias, "")
					}
				}
			}
		}
	}
	for _, m := range members {
		if find(m.alias) != find("") {
			a.scatter("%s is not pinned to one merchant: no equality of %s.%s with a value, nor a join on it with a table that has one",
				m.table, m.alias, a.shardCols[m.table])
		}
	}
}

// collect adds the tables of te to members and its join conditions to conds.
func (a *analysis) collect(te sqlparser.TableExpr, members *[]member, conds *[]sqlparser.Expr) {
	switch t := te.(type) {
	case *sqlparser.AliasedTableExpr:
		switch x := t.Expr.(type) {
		case sqlparser.TableName:
			name := x.Name.String()
			if name == "dual" {
				return
			}
			a.r.tables = append(a.r.tables, name)
			if _, ok := a.shardCols[name]; !ok {
				a.scatter("table %s is not in %s", name, filepath.Base(vschemaFile))
				return
			}
			alias := name
			if !t.As.IsEmpty() {
				alias = t.As.String()
			}
			*members = append(*members, member{alias: alias, table: name})
		}
		// A derived table is a scope of its own, checked by scope's walk.
	case *sqlparser.JoinTableExpr:
		a.collect(t.LeftExpr, members, conds)
		a.collect(t.RightExpr, members, conds)
		if t.Condition != nil {
			if t.Condition.On != nil {
				*conds = append(*conds, t.Condition.On)
			}
			if len(t.Condition.Using) > 0 {
				a.scatter("a join USING (%s) is not analysed: join ON the shard columns", sqlparser.String(t.Condition.Using))
			}
		}
	case *sqlparser.ParenTableExpr:
		for _, x := range t.Exprs {
			a.collect(x, members, conds)
		}
	default:
		a.scatter("table expression %s not analysed", sqlparser.String(te))
	}
}

// insert: the shard column must be among the columns, with a value (not a
// subquery, not NULL) in every row.
func (a *analysis) insert(s *sqlparser.Insert) {
	tn, err := s.Table.TableName()
	if err != nil {
		a.scatter("INSERT target not analysed: %v", err)
		return
	}
	name := tn.Name.String()
	a.r.tables = append(a.r.tables, name)
	col, ok := a.shardCols[name]
	if !ok {
		a.scatter("table %s is not in %s", name, filepath.Base(vschemaFile))
		return
	}
	at := -1
	for i, c := range s.Columns {
		if c.EqualString(col) {
			at = i
		}
	}
	if at < 0 {
		a.scatter("INSERT INTO %s names no %s column", name, col)
		return
	}
	rows, ok := s.Rows.(sqlparser.Values)
	if !ok {
		a.scatter("INSERT INTO %s takes its rows from a query: the shard of each row is not known from the statement", name)
		return
	}
	for _, row := range rows {
		if at >= len(row) || !isValue(row[at]) {
			a.scatter("INSERT INTO %s: a row's %s is not a value", name, col)
			return
		}
	}
	a.r.pinned[name+"."+col] = true
}

// conjuncts splits e at its top-level ANDs.
func conjuncts(e sqlparser.Expr) []sqlparser.Expr {
	if and, ok := e.(*sqlparser.AndExpr); ok {
		return append(conjuncts(and.Left), conjuncts(and.Right)...)
	}
	return []sqlparser.Expr{e}
}

// isValue: a bind variable or a non-NULL literal, which names one shard.
func isValue(e sqlparser.Expr) bool {
	switch e.(type) {
	case *sqlparser.Argument, *sqlparser.Literal:
		return true
	}
	return false
}

// createdTables parses SQL files (the up-migrations of a directory, in
// order, or one file) and returns the tables they leave behind (created,
// less dropped, renames followed).
func createdTables(tb testing.TB, p *sqlparser.Parser, path string) []string {
	tb.Helper()
	files := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.up.sql"))
		if err != nil || len(files) == 0 {
			tb.Fatalf("no migrations in %s: %v", path, err)
		}
		sort.Strings(files)
	}
	tables := map[string]bool{}
	for _, f := range files {
		for _, t := range ddl(tb, p, f) {
			switch s := t.(type) {
			case *sqlparser.CreateTable:
				tables[s.Table.Name.String()] = true
			case *sqlparser.DropTable:
				for _, n := range s.FromTables {
					delete(tables, n.Name.String())
				}
			case *sqlparser.RenameTable:
				for _, pair := range s.TablePairs {
					delete(tables, pair.FromTable.Name.String())
					tables[pair.ToTable.Name.String()] = true
				}
			case *sqlparser.AlterTable:
				for _, o := range s.AlterOptions {
					if r, ok := o.(*sqlparser.RenameTableName); ok {
						delete(tables, s.Table.Name.String())
						tables[r.Table.Name.String()] = true
					}
				}
			}
		}
	}
	out := make([]string, 0, len(tables))
	for t := range tables {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// ddl parses every statement of a SQL file.
func ddl(tb testing.TB, p *sqlparser.Parser, file string) []sqlparser.Statement {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	pieces, err := p.SplitStatementToPieces(string(b))
	if err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	var out []sqlparser.Statement
	for _, piece := range pieces {
		st, err := p.Parse(piece)
		if err != nil {
			if strings.Contains(err.Error(), "empty statement") {
				continue // a piece of comments only
			}
			tb.Fatalf("%s: cannot parse %q: %v", file, piece, err)
		}
		out = append(out, st)
	}
	return out
}
