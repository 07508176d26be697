package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasetrace"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Tracing: the Manager and every guard take the same TracerProvider. A tool
// call's trace then holds its Run, the Run's Acquire, each guarded write
// and the Release. Here a run on one device is taken over by another
// ("continue here") while it works; its late write is refused as stale.
// The spans go to an in-memory recorder and are printed as a tree (names
// and outcomes; the ids and tokens they also carry vary per run). In
// production pass the SDK's provider with an exporter (OTLP, …) instead.
func ExampleConfig_tracing() {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(ctx) }()

	pool, err := pgxpool.New(ctx, exampleDatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: "app"}, migrations.Lease); err != nil {
		log.Fatal(err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: "app", TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	guard, err := memguard.New(memguard.Config{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	tracer := tp.Tracer("app")

	key := conversation()
	draft := key.Resource("draft")
	write := func(context.Context) error { return nil }
	callCtx, call := tracer.Start(ctx, "tool-call")
	err = m.Run(callCtx, key, func(ctx context.Context, _ *lease.Lease) error {
		if err := guard.Do(ctx, draft, write); err != nil {
			return err
		}
		// The user continues on another device: a takeover, in a trace of
		// its own, and a write there.
		otherCtx, other := tracer.Start(context.Background(), "continue-here")
		l2, err := m.Takeover(otherCtx, key)
		if err != nil {
			return err
		}
		_ = guard.Do(l2.Context(), draft, write)
		_, _ = l2.Release(otherCtx)
		other.End()
		<-ctx.Done() // this run is told at once
		// A run that ignores its context writes late: refused.
		return guard.Do(context.WithoutCancel(ctx), draft, write)
	})
	call.End()
	fmt.Println(errors.Is(err, lease.ErrTakenOver), errors.Is(err, fence.ErrStale))
	printTrace(rec.Ended())
	// Output:
	// true true
	// tool-call
	//   fencekit.lease.run outcome=taken_over [Error]
	//     fencekit.lease.acquire outcome=granted
	//     fencekit.guard.write kind=memory outcome=accepted
	//     fencekit.lease.lost cause=taken_over [Error]
	//     fencekit.guard.write kind=memory outcome=stale
	//     fencekit.lease.release outcome=not-holder
	// continue-here
	//   fencekit.lease.takeover outcome=granted
	//   fencekit.guard.write kind=memory outcome=accepted
	//   fencekit.lease.release outcome=released
}

// exampleDatabaseURL is the test database's URL.
func exampleDatabaseURL() string {
	if url := os.Getenv("TEST_DATABASE_URL"); url != "" {
		return url
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

// printTrace prints spans as trees (children in start order), each span
// with its outcome-like attributes and an Error status.
func printTrace(spans []sdktrace.ReadOnlySpan) {
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else if s.Name() != leasetrace.SpanRenewBatch && s.Name() != leasetrace.SpanHeartbeat {
			roots = append(roots, s)
		}
	}
	shown := map[string]string{
		leasetrace.AttrOutcome: "outcome", leasetrace.AttrCause: "cause",
		"fencekit.guard.kind": "kind", "fencekit.guard.outcome": "outcome",
	}
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		line := strings.Repeat("  ", depth) + s.Name()
		for _, kv := range s.Attributes() {
			if name, ok := shown[string(kv.Key)]; ok {
				line += " " + name + "=" + kv.Value.String()
			}
		}
		if s.Status().Code == codes.Error {
			line += " [Error]"
		}
		fmt.Println(line)
		for _, c := range children[s.SpanContext().SpanID()] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
}
