package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	// SQLite support of DBOS (the modernc.org/sqlite driver, registered as "sqlite").
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
	// database/sql driver "pgx", for the harness's own queries against PostgreSQL.
	_ "github.com/jackc/pgx/v5/stdlib"
)

// backend is one system database DBOS runs on. Every workload starts on an empty system
// database (prepare), so that no workload recovers or scans what an earlier one left.
type backend struct {
	system string // result "system": dbos-postgres or dbos-sqlite
	kind   string // postgres or sqlite

	pgDSN     string // postgres: the database DBOS keeps its "dbos" schema in
	sqliteDir string // sqlite: the directory of the per-workload database files

	url   string  // the DatabaseURL of the current workload
	query *sql.DB // the harness's own connection (counts, never writes during a timing)
}

func newBackend(kind, pgDSN, sqliteDir string) *backend {
	return &backend{system: "dbos-" + kind, kind: kind, pgDSN: pgDSN, sqliteDir: sqliteDir}
}

// prepare gives the workload an empty system database and returns its DatabaseURL.
func (b *backend) prepare(ctx context.Context, workload string) (string, error) {
	b.closeQuery()
	switch b.kind {
	case "postgres":
		db, err := sql.Open("pgx", b.pgDSN)
		if err != nil {
			return "", err
		}
		if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS dbos CASCADE"); err != nil {
			db.Close()
			return "", fmt.Errorf("reset postgres system database: %w", err)
		}
		b.query = db
		b.url = b.pgDSN
	case "sqlite":
		path := filepath.Join(b.sqliteDir, strings.ToLower(workload)+".sqlite")
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
				return "", err
			}
		}
		b.url = "sqlite:" + path
	default:
		return "", fmt.Errorf("unknown backend %q", b.kind)
	}
	return b.url, nil
}

// launched opens the harness's own connection once DBOS has created the system database.
func (b *backend) launched() error {
	if b.kind != "sqlite" {
		return nil
	}
	db, err := sql.Open("sqlite", strings.TrimPrefix(b.url, "sqlite:"))
	if err != nil {
		return err
	}
	b.query = db
	return nil
}

func (b *backend) closeQuery() {
	if b.query != nil {
		b.query.Close()
		b.query = nil
	}
}

// table qualifies a DBOS system table name (PostgreSQL keeps them in the "dbos" schema).
func (b *backend) table(name string) string {
	if b.kind == "postgres" {
		return "dbos." + name
	}
	return name
}

// countSteps counts the checkpointed operations named fn (all when fn is "") of the workflows
// whose ID starts with prefix. Prefixes and names are the harness's own constants.
func (b *backend) countSteps(ctx context.Context, prefix, fn string) (int, error) {
	q := fmt.Sprintf("SELECT count(*) FROM %s WHERE workflow_uuid LIKE '%s%%'", b.table("operation_outputs"), prefix)
	if fn != "" {
		q += fmt.Sprintf(" AND function_name = '%s'", fn)
	}
	var n int
	err := b.query.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

// serverPIDs returns the PostgreSQL postmaster and its children, or nil for SQLite (which runs
// inside the DBOS process) and when the postmaster cannot be found.
func (b *backend) serverPIDs(ctx context.Context) func() []int {
	if b.kind != "postgres" {
		return nil
	}
	var dir string
	if err := b.query.QueryRowContext(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		slog.Warn("postgres process metrics unavailable: cannot read data_directory", "err", err)
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		slog.Warn("postgres process metrics unavailable", "err", err)
		return nil
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		slog.Warn("postgres process metrics unavailable: malformed postmaster.pid", "err", err)
		return nil
	}
	return func() []int { return withChildren(pid) }
}
