// Package s3fake is a FAKE of Amazon S3, FOR TESTS ONLY; never use it in
// production code. It is an httptest server that speaks the small part of the
// S3 REST protocol the SDK uses for blob storage (path-style PUT, GET, HEAD
// and DELETE object), so tests run the real aws-sdk-go-v2 client end to end,
// signing and all, without AWS.
//
// It checks what a careful server would: a SigV4 Authorization header with
// the expected access key and region, the declared payload hash
// (x-amz-content-sha256), Content-MD5, x-amz-checksum-sha256/-crc32
// (as a header or as an aws-chunked trailer) and If-None-Match: "*". It does
// not verify the signature itself, nor implement buckets, listing, multipart
// or versioning.
//
// To point a client at it: endpoint URL() with path-style addressing, region
// and bucket as given to New, and static credentials whose access key is the
// one given to New (any secret), e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
// and AWS_REGION set with t.Setenv, or config.WithCredentialsProvider.
package s3fake

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a fake S3 serving one bucket from memory.
type Server struct {
	srv       *httptest.Server
	accessKey string
	region    string
	bucket    string

	mu       sync.Mutex
	objects  map[string][]byte // key → bytes
	requests []Request
	// failN requests still to fail with failStatus and failCode.
	failStatus int
	failCode   string
	failN      int
}

// Request is one request the fake served: its method, object key and the
// status it answered.
type Request struct {
	Method, Key string
	Status      int
}

// New starts the fake on 127.0.0.1, over TLS when useTLS (then use
// Client, which trusts its certificate), and stops it when the test ends.
// Requests must be signed for accessKey and region.
func New(t testing.TB, accessKey, region, bucket string, useTLS bool) *Server {
	t.Helper()
	f := &Server{accessKey: accessKey, region: region, bucket: bucket, objects: map[string][]byte{}}
	if useTLS {
		f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	} else {
		f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	}
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the endpoint to give the S3 client.
func (f *Server) URL() string { return f.srv.URL }

// Client is an HTTP client that trusts the fake's TLS certificate.
func (f *Server) Client() *http.Client { return f.srv.Client() }

// Object returns a copy of the stored bytes of key.
func (f *Server) Object(key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[key]
	return bytes.Clone(b), ok
}

// SetObject stores bytes under key directly, bypassing the protocol (used to
// simulate corruption at rest).
func (f *Server) SetObject(key string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[key] = bytes.Clone(b)
}

// Keys lists the keys of the stored objects, sorted.
func (f *Server) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.objects))
}

// FailNext makes the next n requests fail with status and the S3 error code.
func (f *Server) FailNext(n, status int, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failStatus, f.failCode = n, status, code
}

// Requests returns the requests served so far, in order.
func (f *Server) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w}
	key := f.handle(rec, r)
	f.mu.Lock()
	f.requests = append(f.requests, Request{Method: r.Method, Key: key, Status: rec.status})
	f.mu.Unlock()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (f *Server) handle(w http.ResponseWriter, r *http.Request) (key string) {
	// Path style: /<bucket>/<key>.
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if err := f.checkAuth(r); err != nil {
		s3Error(w, r, http.StatusForbidden, "SignatureDoesNotMatch", err.Error())
		return key
	}
	f.mu.Lock()
	if f.failN > 0 {
		f.failN--
		status, code := f.failStatus, f.failCode
		f.mu.Unlock()
		s3Error(w, r, status, code, "injected failure")
		return key
	}
	f.mu.Unlock()
	if bucket != f.bucket {
		s3Error(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return key
	}
	if key == "" {
		s3Error(w, r, http.StatusNotImplemented, "NotImplemented", "bucket operations are not implemented by the fake")
		return key
	}
	for q := range r.URL.Query() {
		if q != "x-id" { // the SDK adds x-id=<Operation>; anything else is an unsupported sub-resource
			s3Error(w, r, http.StatusNotImplemented, "NotImplemented", "sub-resource ?"+q+" is not implemented by the fake")
			return key
		}
	}
	switch r.Method {
	case http.MethodPut:
		f.putObject(w, r, key)
	case http.MethodGet, http.MethodHead:
		f.getObject(w, r, key)
	case http.MethodDelete:
		f.deleteObject(w, key)
	default:
		s3Error(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", "method not implemented by the fake")
	}
	return key
}

// checkAuth checks the shape and credential scope of a SigV4 header.
func (f *Server) checkAuth(r *http.Request) error {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 Credential=")
	if !ok {
		return fmt.Errorf("missing or non-SigV4 Authorization header %q", auth)
	}
	cred, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[0] != f.accessKey || parts[2] != f.region || parts[3] != "s3" || parts[4] != "aws4_request" {
		return fmt.Errorf("unexpected credential scope %q", cred)
	}
	if !strings.Contains(auth, "SignedHeaders=") || !strings.Contains(auth, "Signature=") {
		return errors.New("the Authorization header lacks SignedHeaders or Signature")
	}
	if r.Header.Get("X-Amz-Date") == "" {
		return errors.New("missing X-Amz-Date")
	}
	return nil
}

func (f *Server) putObject(w http.ResponseWriter, r *http.Request, key string) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s3Error(w, r, http.StatusBadRequest, "IncompleteBody", err.Error())
		return
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	body := raw
	trailers := http.Header{}
	if strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") || strings.HasPrefix(payloadHash, "STREAMING-") {
		body, trailers, err = decodeAWSChunked(raw)
		if err != nil {
			s3Error(w, r, http.StatusBadRequest, "InvalidRequest", "aws-chunked body: "+err.Error())
			return
		}
		if dl := r.Header.Get("X-Amz-Decoded-Content-Length"); dl != "" && dl != strconv.Itoa(len(body)) {
			s3Error(w, r, http.StatusBadRequest, "IncompleteBody", "decoded length mismatch")
			return
		}
	} else if payloadHash != "UNSIGNED-PAYLOAD" {
		sum := sha256.Sum256(body)
		if payloadHash != hex.EncodeToString(sum[:]) {
			s3Error(w, r, http.StatusBadRequest, "XAmzContentSHA256Mismatch", "payload hash mismatch")
			return
		}
	}
	if m := r.Header.Get("Content-Md5"); m != "" {
		sum := md5.Sum(body)
		if m != base64.StdEncoding.EncodeToString(sum[:]) {
			s3Error(w, r, http.StatusBadRequest, "BadDigest", "Content-MD5 mismatch")
			return
		}
	}
	checksum := func(name string) string {
		if v := r.Header.Get(name); v != "" {
			return v
		}
		return trailers.Get(name)
	}
	if v := checksum("X-Amz-Checksum-Sha256"); v != "" {
		sum := sha256.Sum256(body)
		if v != base64.StdEncoding.EncodeToString(sum[:]) {
			s3Error(w, r, http.StatusBadRequest, "BadDigest", "x-amz-checksum-sha256 mismatch")
			return
		}
	}
	if v := checksum("X-Amz-Checksum-Crc32"); v != "" {
		sum := binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(body))
		if v != base64.StdEncoding.EncodeToString(sum) {
			s3Error(w, r, http.StatusBadRequest, "BadDigest", "x-amz-checksum-crc32 mismatch")
			return
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if _, exists := f.objects[key]; exists && r.Header.Get("If-None-Match") == "*" {
		s3Error(w, r, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
		return
	}
	f.objects[key] = body
	w.Header().Set("ETag", etag(body))
	w.WriteHeader(http.StatusOK)
}

func (f *Server) getObject(w http.ResponseWriter, r *http.Request, key string) {
	f.mu.Lock()
	body, ok := f.objects[key]
	f.mu.Unlock()
	if !ok {
		s3Error(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	w.Header().Set("ETag", etag(body))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// deleteObject removes key; as in S3, a missing key is deleted all the same.
func (f *Server) deleteObject(w http.ResponseWriter, key string) {
	f.mu.Lock()
	delete(f.objects, key)
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func etag(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// s3Error writes an S3 XML error; HEAD responses carry no body, as in S3.
func s3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	w.Header().Set("X-Amz-Request-Id", "FAKE0000")
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	type errorXML struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string
		Message   string
		Resource  string
		RequestID string `xml:"RequestId"`
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(errorXML{Code: code, Message: msg, Resource: r.URL.Path, RequestID: "FAKE0000"})
}

// decodeAWSChunked decodes an aws-chunked body: "<hex size>[;ext]\r\n<data>\r\n"
// repeated, a zero-size chunk, then trailer headers and a blank line.
func decodeAWSChunked(raw []byte) ([]byte, http.Header, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	var out bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, nil, fmt.Errorf("chunk header: %w", err)
		}
		sizeHex, _, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ";")
		size, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || size < 0 {
			return nil, nil, fmt.Errorf("chunk size %q", sizeHex)
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(&out, br, size); err != nil {
			return nil, nil, fmt.Errorf("chunk data: %w", err)
		}
		if crlf, err := br.ReadString('\n'); err != nil || crlf != "\r\n" {
			return nil, nil, errors.New("chunk not followed by CRLF")
		}
	}
	trailers := http.Header{}
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, nil, fmt.Errorf("trailer %q", line)
		}
		trailers.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		if err != nil {
			break
		}
	}
	return out.Bytes(), trailers, nil
}
