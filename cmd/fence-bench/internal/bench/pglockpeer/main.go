package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	_ "github.com/lib/pq" // the driver pglock.New requires
)

func main() {
	dsn := flag.String("db", "", "PostgreSQL URL (required)")
	table := flag.String("table", "", "schema-qualified name of pglock's table, created at start (required)")
	workers := flag.Int("workers", 8, "concurrent workers per run")
	guard := flag.Bool("guard", false, "measure pgguard's marks mode against a pglock-protected write and print metric lines (no -table)")
	quick := flag.Bool("quick", false, "with -guard: short run")
	heartbeat := flag.Bool("heartbeat", true, "with -guard: pglock's default heartbeat (false: WithHeartbeatFrequency(0), to see what the heartbeat costs)")
	flag.Parse()
	if *guard {
		if *dsn == "" {
			fmt.Fprintln(os.Stderr, "pglockpeer: -db is required")
			os.Exit(2)
		}
		if err := guardMode(*dsn, *quick, *heartbeat); err != nil {
			fmt.Fprintln(os.Stderr, "pglockpeer:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*dsn, *table, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "pglockpeer:", err)
		os.Exit(1)
	}
}

func run(dsn, table string, workers int) error {
	if dsn == "" || table == "" {
		return fmt.Errorf("-db and -table are required")
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	c, err := newCycler(db, table, workers)
	if err != nil {
		return err
	}
	if err := c.client.CreateTable(); err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	ctx := context.Background()
	if _, _, err := c.cycles(ctx, 50*time.Millisecond); err != nil { // warm the connections
		return err
	}
	fmt.Println("ready")
	return serve(os.Stdin, os.Stdout, func(d time.Duration) (int, time.Duration, error) { return c.cycles(ctx, d) })
}
