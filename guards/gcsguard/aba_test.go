package gcsguard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestABAIdenticalBytes: a stale writer reads the object (token 7), a newer
// holder writes byte-identical content under token 8, then the stale writer
// commits. With S3's MD5 ETag the stale precondition would still match;
// with GCS generations it must not.
func TestABAIdenticalBytes(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	stale := e.store(t, bucket, Config{})
	newer := e.store(t, bucket, Config{})
	const key, body = "aba/doc", "identical bytes"
	if _, err := stale.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, strings.NewReader(body), int64(len(body)), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stale.afterRead = func(string) {
		once.Do(func() {
			if _, err := newer.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 8)), key, strings.NewReader(body), int64(len(body)), PutOptions{}); err != nil {
				t.Errorf("newer write: %v", err)
			}
		})
	}
	_, err := stale.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, strings.NewReader(body), int64(len(body)), PutOptions{})
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 7 || se.Highest != 8 {
		t.Fatalf("stale write after identical newer write: %v, want StaleError{7, 8}", err)
	}
	_, info, err := newer.GetBytes(ctx, key)
	if err != nil || info.Token != 8 {
		t.Fatalf("final state: token %d, err %v; want 8", info.Token, err)
	}
}

// TestABATombstone: the same with a Delete as the newer write and a
// Fence (re-stamp, nothing staged) as the stale one.
func TestABATombstone(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	stale := e.store(t, bucket, Config{})
	newer := e.store(t, bucket, Config{})
	const key = "aba/tomb"
	if _, err := stale.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), key); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stale.afterRead = func(string) {
		once.Do(func() {
			if _, err := newer.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), key); err != nil {
				t.Errorf("newer delete: %v", err)
			}
		})
	}
	err := stale.Fence(ctx, key, 3, func(context.Context) error { return nil })
	if se, ok := fence.IsStale(err); !ok || se.Highest != 4 {
		t.Fatalf("stale re-stamp after newer tombstone: %v", err)
	}
	info, err := newer.Stat(ctx, key)
	var nf *fence.NotFoundError
	if !errors.As(err, &nf) || !nf.Deleted || nf.Token != 4 || info.Token != 4 {
		t.Fatalf("Stat: %+v, %v", info, err)
	}
}

// TestRestampKeepsContent: a Fence that stages nothing writes the current
// bytes, type and user metadata again under the new token.
func TestRestampKeepsContent(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	const key = "restamp/doc"
	opts := PutOptions{ContentType: "text/markdown", CacheControl: "no-cache", Metadata: map[string]string{"author": "ada"}}
	first, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), key, strings.NewReader("# notes"), int64(len("# notes")), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, key, 9, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b, info, err := s.GetBytes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "# notes" || info.Token != 9 || info.ContentType != "text/markdown" || info.CacheControl != "no-cache" ||
		info.Metadata["author"] != "ada" || len(info.Metadata) != 1 || info.Generation == first.Generation || info.WriteID == first.WriteID {
		t.Fatalf("after re-stamp: %q %+v (first %+v)", b, info, first)
	}
	if _, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 8)), key, strings.NewReader("stale"), int64(len("stale")), PutOptions{}); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 8 after re-stamp at 9: %v", err)
	}
}

// TestPlainReaders: what a client that knows nothing of gcsguard sees.
func TestPlainReaders(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	const key = "plain/report.txt"
	c := fence.Claim{Token: 12, Run: "0b7e4a2c-6c1e-4f59-9a51-1b2f3e4d5c6a"}
	w, err := s.Put(fence.WithClaim(ctx, c), key, strings.NewReader("hello"), int64(len("hello")), PutOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	// A plain storage client reads the bytes and the metadata.
	o := e.client(t).Bucket(s.name).Object(key)
	got, gen := readRaw(ctx, t, o)
	a, err := o.Attrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != "hello" || gen != w.Generation || a.ContentType != "text/plain" || a.Metadata[MetaToken] != "12" ||
		a.Metadata[MetaRun] != c.Run || a.Metadata[MetaWriteID] != w.WriteID {
		t.Fatalf("plain read: %q gen %d attrs %+v", got, gen, a.Metadata)
	}
	// A plain HTTP GET (what a browser or a public URL does).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(e.ts.URL + "/" + s.name + "/" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	hb, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(hb) != "hello" {
		t.Fatalf("plain HTTP GET: %d %q %v", resp.StatusCode, hb, err)
	}
	// A tombstone is a zero-byte object that says so.
	if _, err := s.Delete(fence.WithClaim(ctx, c), key); err != nil {
		t.Fatal(err)
	}
	got, _ = readRaw(ctx, t, o)
	a, _ = o.Attrs(ctx)
	if got != "" || a.Metadata[MetaDeleted] != "true" || a.Metadata[MetaToken] != "12" {
		t.Fatalf("tombstone as seen by a plain client: %q %+v", got, a.Metadata)
	}
}
