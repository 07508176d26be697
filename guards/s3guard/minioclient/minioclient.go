// Package minioclient adapts a minio-go v7 client to s3client.Client, the
// interface through which s3guard talks to S3:
//
//	store, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: "reports"})
//
// Guaranteed: conditional PUTs are sent as If-Match / If-None-Match headers
// (PutObjectOptions.SetMatchETag / SetMatchETagExcept), reads are one GET
// (minio.Core), errors are classified as s3client requires, and keys are
// checked with s3client.CheckKey before anything is sent. Retries are
// minio-go's own. Not guaranteed: anything about the client's configuration
// (endpoint, credentials, transport), which stays the caller's.
package minioclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// Client is a *minio.Client seen through s3client.Client.
type Client struct {
	c *minio.Client
}

var _ s3client.Client = (*Client)(nil)

// New returns the adapter for c. c must not be nil.
func New(c *minio.Client) *Client { return &Client{c: c} }

// MinIO returns the wrapped client.
func (a *Client) MinIO() *minio.Client { return a.c }

func classify(err error) error {
	if err == nil {
		return nil
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return s3client.Classify(err, er.Code, er.StatusCode)
	}
	return err
}

// Put implements s3client.Client.
func (a *Client) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts s3client.PutOptions) (s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return s3client.ObjectInfo{}, err
	}
	po := minio.PutObjectOptions{ContentType: opts.ContentType, UserMetadata: opts.Metadata}
	switch {
	case opts.IfMatch != "" && opts.IfNoneMatch:
		return s3client.ObjectInfo{}, errors.New("minioclient: both IfMatch and IfNoneMatch")
	case opts.IfMatch != "":
		po.SetMatchETag(opts.IfMatch)
	case opts.IfNoneMatch:
		po.SetMatchETagExcept("*")
	}
	ui, err := a.c.PutObject(ctx, bucket, key, body, size, po)
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	return s3client.ObjectInfo{ETag: ui.ETag, Size: ui.Size}, nil
}

// Get implements s3client.Client with one GET (minio.Core).
func (a *Client) Get(ctx context.Context, bucket, key string, opts s3client.GetOptions) (io.ReadCloser, s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return nil, s3client.ObjectInfo{}, err
	}
	var go_ minio.GetObjectOptions
	if opts.IfMatch != "" {
		if err := go_.SetMatchETag(opts.IfMatch); err != nil {
			return nil, s3client.ObjectInfo{}, fmt.Errorf("minioclient: If-Match %q: %w", opts.IfMatch, err)
		}
	}
	rc, oi, _, err := minio.Core{Client: a.c}.GetObject(ctx, bucket, key, go_)
	if err != nil {
		return nil, s3client.ObjectInfo{}, classify(err)
	}
	return rc, info(oi), nil
}

// Head implements s3client.Client.
func (a *Client) Head(ctx context.Context, bucket, key string) (s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return s3client.ObjectInfo{}, err
	}
	oi, err := a.c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	return info(oi), nil
}

func info(oi minio.ObjectInfo) s3client.ObjectInfo {
	return s3client.ObjectInfo{ETag: strings.Trim(oi.ETag, `"`), Size: oi.Size, Metadata: s3client.LowerKeys(oi.UserMetadata)}
}

// Delete implements s3client.Client.
func (a *Client) Delete(ctx context.Context, bucket, key string) error {
	if err := s3client.CheckKey(key); err != nil {
		return err
	}
	return classify(a.c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}))
}

// List implements s3client.Client (ListObjectsV2 with delimiter '/').
func (a *Client) List(ctx context.Context, bucket, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for obj := range a.c.ListObjectsIter(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix}) {
			if obj.Err != nil {
				yield("", classify(obj.Err))
				return
			}
			if strings.HasSuffix(obj.Key, "/") {
				continue // a common prefix, not an object
			}
			if !yield(obj.Key, nil) {
				return
			}
		}
	}
}
