package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Download is a fetched attachment.
type Download struct {
	Body []byte
	// ContentType is the response's Content-Type header as sent (may be
	// empty; the caller decides whether to sniff).
	ContentType string
	// Filename comes from Content-Disposition's filename, else the last
	// URL path segment (unescaped), else "attachment"; never a path.
	Filename string
}

// StatusError is a response status Fetch does not accept.
type StatusError struct {
	Code int
}

func (e *StatusError) Error() string {
	if e.Code >= 300 && e.Code < 400 {
		return fmt.Sprintf("redirect %d not followed", e.Code)
	}
	return fmt.Sprintf("server returned %d", e.Code)
}

// TooLargeError is a download over the caller's byte limit.
type TooLargeError struct {
	Limit int64
}

func (e *TooLargeError) Error() string { return fmt.Sprintf("larger than %d bytes", e.Limit) }

// defaultFetchTimeout is used when Fetch is given no client.
const defaultFetchTimeout = 30 * time.Second

// Fetch downloads raw for an attachment `path`: CheckURL, then GET through
// client (nil means a p.Client(30s) for this download alone), which should
// come from the same Policy; a caller that downloads often keeps one client
// for all its downloads, so that their connections are reused.
// Only 2xx is accepted (a 3xx gives "redirect 302 not followed", since
// redirects are never followed), and a body over maxBytes gives "larger than
// N bytes". Errors are for Describe; those that name the URL name it without
// its query, fragment or password, which may be credentials (a presigned
// URL's signature), so they can be logged. declared, when not nil, hears a
// length the response declares before its body is read, so a caller that
// kept memory for the largest body may give the rest back.
func (p Policy) Fetch(ctx context.Context, client *http.Client, raw string, maxBytes int64, declared func(n int64)) (Download, error) {
	d, err := p.fetch(ctx, client, raw, maxBytes, declared)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = Redact(ue.URL)
	}
	return d, err
}

// Redact returns raw without its query, fragment and password: what of a
// URL can be shown or logged. A URL that does not parse gives "(invalid URL)".
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

func (p Policy) fetch(ctx context.Context, client *http.Client, raw string, maxBytes int64, declared func(n int64)) (Download, error) {
	if maxBytes <= 0 {
		return Download{}, errors.New("egress: Fetch needs a positive maxBytes")
	}
	if err := p.CheckURL(ctx, raw); err != nil {
		return Download{}, err
	}
	if client == nil {
		// Used for this download only: its connection is closed after,
		// not kept idle for a request that will never come.
		client = p.Client(defaultFetchTimeout)
		defer client.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return Download{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Download{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Download{}, &StatusError{Code: resp.StatusCode}
	}
	if resp.ContentLength > maxBytes {
		return Download{}, &TooLargeError{Limit: maxBytes}
	}
	if resp.ContentLength >= 0 && declared != nil {
		declared(resp.ContentLength)
	}
	body, err := readBody(resp, maxBytes)
	if err != nil {
		return Download{}, err
	}
	return Download{
		Body:        body,
		ContentType: strings.TrimSpace(resp.Header.Get("Content-Type")),
		Filename:    filename(resp.Header.Get("Content-Disposition"), req.URL),
	}, nil
}

// readBody reads at most maxBytes of a response, stopping as soon as it has
// more. A declared length is read into one buffer of that size, so memory
// never grows past the body itself.
func readBody(resp *http.Response, maxBytes int64) ([]byte, error) {
	if resp.ContentLength >= 0 {
		body := make([]byte, resp.ContentLength)
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			return nil, err
		}
		return body, nil // net/http ends the body at its declared length
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > maxBytes {
		return nil, &TooLargeError{Limit: maxBytes}
	}
	return body, nil
}

// filename picks the attachment's name: Content-Disposition's filename
// (mime also decodes RFC 2231 filename*), else the last URL path segment.
func filename(disposition string, u *url.URL) string {
	if disposition != "" {
		if _, params, err := mime.ParseMediaType(disposition); err == nil {
			if name := cleanFilename(params["filename"]); name != "" {
				return name
			}
		}
	}
	seg := u.EscapedPath()
	if i := strings.LastIndex(seg, "/"); i >= 0 {
		seg = seg[i+1:]
	}
	if name, err := url.PathUnescape(seg); err == nil {
		if name = cleanFilename(name); name != "" {
			return name
		}
	}
	return "attachment"
}

// cleanFilename keeps only the final element of a name that may carry a
// path (either separator), drops control characters and refuses "." and
// "..".
func cleanFilename(s string) string {
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if s == "." || s == ".." {
		return ""
	}
	return s
}
