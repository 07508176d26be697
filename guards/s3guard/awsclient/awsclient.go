// Package awsclient adapts an aws-sdk-go-v2 S3 client to s3client.Client,
// the interface through which s3guard talks to S3:
//
//	store, err := s3guard.New(s3guard.Config{Client: awsclient.New(s3Client), Bucket: "reports"})
//
// Conditional writes use PutObjectInput.IfMatch and IfNoneMatch (supported by
// AWS S3 since 2024 and by MinIO); a body that is not an io.ReadSeeker, or of
// unknown length, is sent as a multipart upload of buffered parts completed
// with the same condition, because the SDK cannot sign, checksum or retry an
// unseekable stream over plain HTTP.
//
// Guaranteed: reads are one GetObject, errors are classified as s3client
// requires, ETags are returned unquoted, and keys are checked with
// s3client.CheckKey before anything is sent. Retries are the SDK's own (its
// standard retryer retries every transport error, including a lost reply).
// Not guaranteed: anything about the client's configuration (endpoint,
// region, credentials, path-style addressing, HTTP client), which stays the
// caller's; for MinIO set UsePathStyle.
package awsclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// PartSize is the size of the buffered parts of a multipart upload (the
// path for unseekable or unknown-length bodies). A body that ends within
// the first part is sent as one PutObject.
const PartSize = 8 << 20

// Client is an *s3.Client seen through s3client.Client.
type Client struct {
	c *s3.Client
}

var _ s3client.Client = (*Client)(nil)

// New returns the adapter for c. c must not be nil.
func New(c *s3.Client) *Client { return &Client{c: c} }

// S3 returns the wrapped client.
func (a *Client) S3() *s3.Client { return a.c }

func classify(err error) error {
	if err == nil {
		return nil
	}
	var code string
	var status int
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return s3client.Classify(err, code, status)
}

func quote(etag string) *string { return aws.String(`"` + strings.Trim(etag, `"`) + `"`) }

func unquote(etag *string) string { return strings.Trim(aws.ToString(etag), `"`) }

// Put implements s3client.Client.
func (a *Client) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts s3client.PutOptions) (s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return s3client.ObjectInfo{}, err
	}
	if opts.IfMatch != "" && opts.IfNoneMatch {
		return s3client.ObjectInfo{}, errors.New("awsclient: both IfMatch and IfNoneMatch")
	}
	if rs, ok := body.(io.ReadSeeker); ok && size >= 0 {
		return a.putOnce(ctx, bucket, key, rs, size, opts)
	}
	// Read the first part: a short body is one PutObject after all.
	first := make([]byte, PartSize)
	n, err := io.ReadFull(body, first)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		if size >= 0 && int64(n) != size {
			return s3client.ObjectInfo{}, fmt.Errorf("awsclient: body of %d bytes, size %d", n, size)
		}
		return a.putOnce(ctx, bucket, key, bytes.NewReader(first[:n]), int64(n), opts)
	case err != nil:
		return s3client.ObjectInfo{}, fmt.Errorf("awsclient: read body: %w", err)
	}
	return a.putMultipart(ctx, bucket, key, first, body, size, opts)
}

func (a *Client) putOnce(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, opts s3client.PutOptions) (s3client.ObjectInfo, error) {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(size),
		Metadata:      opts.Metadata,
	}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	if opts.IfMatch != "" {
		in.IfMatch = quote(opts.IfMatch)
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := a.c.PutObject(ctx, in)
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	return s3client.ObjectInfo{ETag: unquote(out.ETag), Size: size}, nil
}

// putMultipart uploads first and the rest of body in PartSize parts and
// completes the upload under opts' condition. On any failure it aborts the
// upload.
func (a *Client) putMultipart(ctx context.Context, bucket, key string, first []byte, body io.Reader, size int64, opts s3client.PutOptions) (_ s3client.ObjectInfo, err error) {
	create := &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), Metadata: opts.Metadata}
	if opts.ContentType != "" {
		create.ContentType = aws.String(opts.ContentType)
	}
	up, err := a.c.CreateMultipartUpload(ctx, create)
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	defer func() {
		if err != nil {
			_, _ = a.c.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{
				Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			})
		}
	}()
	var parts []types.CompletedPart
	var total int64
	buf := first
	for num := int32(1); ; num++ {
		out, err := a.c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(num), Body: bytes.NewReader(buf), ContentLength: aws.Int64(int64(len(buf))),
		})
		if err != nil {
			return s3client.ObjectInfo{}, classify(err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		total += int64(len(buf))
		if len(buf) < PartSize {
			break
		}
		buf = first[:PartSize] // reuse the buffer
		n, rerr := io.ReadFull(body, buf)
		buf = buf[:n]
		if rerr == io.EOF || (rerr == io.ErrUnexpectedEOF) {
			if n == 0 {
				break
			}
			continue
		}
		if rerr != nil {
			return s3client.ObjectInfo{}, fmt.Errorf("awsclient: read body: %w", rerr)
		}
	}
	if size >= 0 && total != size {
		return s3client.ObjectInfo{}, fmt.Errorf("awsclient: body of %d bytes, size %d", total, size)
	}
	complete := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if opts.IfMatch != "" {
		complete.IfMatch = quote(opts.IfMatch)
	}
	if opts.IfNoneMatch {
		complete.IfNoneMatch = aws.String("*")
	}
	out, err := a.c.CompleteMultipartUpload(ctx, complete)
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	return s3client.ObjectInfo{ETag: unquote(out.ETag), Size: total}, nil
}

// Get implements s3client.Client with one GetObject.
func (a *Client) Get(ctx context.Context, bucket, key string, opts s3client.GetOptions) (io.ReadCloser, s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return nil, s3client.ObjectInfo{}, err
	}
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if opts.IfMatch != "" {
		in.IfMatch = quote(opts.IfMatch)
	}
	out, err := a.c.GetObject(ctx, in)
	if err != nil {
		return nil, s3client.ObjectInfo{}, classify(err)
	}
	return out.Body, s3client.ObjectInfo{
		ETag: unquote(out.ETag), Size: aws.ToInt64(out.ContentLength), Metadata: s3client.LowerKeys(out.Metadata),
	}, nil
}

// Head implements s3client.Client.
func (a *Client) Head(ctx context.Context, bucket, key string) (s3client.ObjectInfo, error) {
	if err := s3client.CheckKey(key); err != nil {
		return s3client.ObjectInfo{}, err
	}
	out, err := a.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return s3client.ObjectInfo{}, classify(err)
	}
	return s3client.ObjectInfo{
		ETag: unquote(out.ETag), Size: aws.ToInt64(out.ContentLength), Metadata: s3client.LowerKeys(out.Metadata),
	}, nil
}

// Delete implements s3client.Client.
func (a *Client) Delete(ctx context.Context, bucket, key string) error {
	if err := s3client.CheckKey(key); err != nil {
		return err
	}
	_, err := a.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	return classify(err)
}

// List implements s3client.Client (ListObjectsV2 with delimiter '/').
func (a *Client) List(ctx context.Context, bucket, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		p := s3.NewListObjectsV2Paginator(a.c, &s3.ListObjectsV2Input{
			Bucket: aws.String(bucket), Prefix: aws.String(prefix), Delimiter: aws.String("/"),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield("", classify(err))
				return
			}
			for _, obj := range page.Contents {
				if !yield(aws.ToString(obj.Key), nil) {
					return
				}
			}
		}
	}
}
