// Package httpserver is the HTTP plumbing shared by every route: RFC 9457
// problem responses, request ids, strict JSON binding, body and rate limits,
// query parsing, metrics, request logging and the echo server itself.
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/database"
)

// ProblemTypeBase prefixes every problem's code to form its "type" URI.
const ProblemTypeBase = "https://mailroom.dev/problems/"

// ContentTypeProblem is the media type of every error body.
const ContentTypeProblem = "application/problem+json"

// FieldError names one invalid field of a request and what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem detail. Handlers return it as an error and
// ErrorHandler writes it, filling in the request id.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail"`
	Code      string       `json:"code"`
	RequestID string       `json:"request_id"`
	Errors    []FieldError `json:"errors,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

// Error implements error.
func (p *Problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
}

// NewProblem builds a problem with the given status, machine-readable code
// and human-readable detail; type and title are derived.
func NewProblem(status int, code, detail string) *Problem {
	return &Problem{
		Type:   ProblemTypeBase + code,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// BadRequest is a 400; code defaults to "bad_request".
func BadRequest(code, detail string) *Problem {
	if code == "" {
		code = "bad_request"
	}
	return NewProblem(http.StatusBadRequest, code, detail)
}

// Unauthorized is a 401 with code "unauthorized".
func Unauthorized(detail string) *Problem {
	return NewProblem(http.StatusUnauthorized, "unauthorized", detail)
}

// Forbidden is a 403; code defaults to "forbidden".
func Forbidden(code, detail string) *Problem {
	if code == "" {
		code = "forbidden"
	}
	return NewProblem(http.StatusForbidden, code, detail)
}

// NotFound is a 404 with code "not_found".
func NotFound(detail string) *Problem {
	return NewProblem(http.StatusNotFound, "not_found", detail)
}

// Conflict is a 409; code defaults to "conflict".
func Conflict(code, detail string) *Problem {
	if code == "" {
		code = "conflict"
	}
	return NewProblem(http.StatusConflict, code, detail)
}

// Validation is a 422 with code "validation_failed", listing the invalid
// fields and summarising them in the detail.
func Validation(errs ...FieldError) *Problem {
	var detail string
	switch len(errs) {
	case 0:
		detail = "the request is invalid"
	case 1:
		// The colon keeps a message that names its field ("html or text
		// is required") from reading as a stutter.
		detail = errs[0].Field + ": " + errs[0].Message
	default:
		var names []string // each field once: one may have several errors
		for _, e := range errs {
			if !slices.Contains(names, e.Field) {
				names = append(names, e.Field)
			}
		}
		if len(names) == 1 {
			detail = fmt.Sprintf("%s is invalid: %d errors", names[0], len(errs))
		} else {
			detail = fmt.Sprintf("%d fields are invalid: %s", len(names), strings.Join(names, ", "))
		}
	}
	p := NewProblem(http.StatusUnprocessableEntity, "validation_failed", detail)
	p.Errors = append([]FieldError(nil), errs...)
	return p
}

// LimitExceeded is a 422 with code "limit_exceeded" (e.g. an 11th webhook endpoint).
func LimitExceeded(detail string) *Problem {
	return NewProblem(http.StatusUnprocessableEntity, "limit_exceeded", detail)
}

// TooLarge is a 413 with code "payload_too_large".
func TooLarge(detail string) *Problem {
	return NewProblem(http.StatusRequestEntityTooLarge, "payload_too_large", detail)
}

// TooManyRequests is a 429 with code "rate_limited" and a Retry-After header.
func TooManyRequests(retryAfter time.Duration) *Problem {
	secs := retryAfterSeconds(retryAfter)
	p := NewProblem(http.StatusTooManyRequests, "rate_limited",
		"rate limit exceeded; retry after "+seconds(secs))
	p.RetryAfter = time.Duration(secs) * time.Second
	return p
}

// retryAfterSeconds rounds up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// echo context key marking a request that matched no route (for metrics and logs).
const unmatchedKey = "mailroom.unmatched"

// StatusClientClosed is the status recorded for a request whose client
// closed its connection before the answer (nginx's 499).
const StatusClientClosed = 499

// ErrorHandler writes every error as application/problem+json carrying the
// request id. Unexpected errors become a 500 whose body reveals nothing; the
// real error is logged with the request id.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(err error, c echo.Context) {
		if err == nil {
			return
		}
		reqID := RequestIDOf(c) // the id the client sees
		if errors.Is(err, echo.ErrNotFound) || errors.Is(err, echo.ErrMethodNotAllowed) {
			// The router's sentinels: no route matched this request.
			c.Set(unmatchedKey, true)
		}
		ids := RequestIDsOf(c).logAttrs()
		if c.Response().Committed {
			logger.LogAttrs(context.Background(), slog.LevelError, "error after response was committed", append(ids,
				slog.String("method", c.Request().Method), slog.String("route", c.Path()), slog.Any("err", err))...)
			return
		}

		if errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil {
			// The client went away while its request waited: no one reads
			// an answer, and no server failed. Counted and logged as
			// nginx does, 499.
			c.Response().WriteHeader(StatusClientClosed)
			return
		}
		p := toProblem(err, c.Request().Method)
		// Refusals that shed load, or that readiness logs itself when it
		// changes, are answers, not failures: the request line has them.
		if p.Status >= 500 && p.Code != "not_ready" && p.Code != "server_busy" {
			attrs := append(ids, slog.String("method", c.Request().Method), slog.String("route", c.Path()), slog.Any("err", err))
			var pe *PanicError
			if errors.As(err, &pe) {
				attrs = append(attrs, slog.String("stack", string(pe.Stack)))
			}
			level := slog.LevelError
			if p.Code == "lookup_unavailable" || p.Code == "write_contention" || p.Code == "not_yet_visible" {
				level = slog.LevelWarn // a passing condition outside this request's code, retried by its client
			}
			logger.LogAttrs(context.Background(), level, "request failed", attrs...)
		}

		// Copy so shared *Problem values are never mutated.
		out := *p
		out.RequestID = reqID
		if out.Title == "" {
			out.Title = http.StatusText(out.Status)
		}
		if out.Type == "" {
			out.Type = ProblemTypeBase + out.Code
		}

		h := c.Response().Header()
		h.Set(echo.HeaderContentType, ContentTypeProblem)
		h.Del(echo.HeaderContentLength)
		if out.RetryAfter > 0 {
			h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(out.RetryAfter), 10))
		}
		if out.Status == http.StatusUnauthorized {
			// RFC 9110 asks a 401 to name the scheme it wants.
			h.Set("WWW-Authenticate", `Bearer realm="mailroom"`)
		}
		body, merr := json.Marshal(&out)
		if merr != nil { // cannot happen with these field types
			logger.LogAttrs(context.Background(), slog.LevelError, "encoding problem", append(ids, slog.Any("error", merr))...)
			c.Response().WriteHeader(http.StatusInternalServerError)
			return
		}
		if c.Request().Method == http.MethodHead {
			// GET's headers, its length included, without its body.
			h.Set(echo.HeaderContentLength, strconv.Itoa(len(body)+1))
			c.Response().WriteHeader(out.Status)
			return
		}
		c.Response().WriteHeader(out.Status)
		if _, werr := c.Response().Write(append(body, '\n')); werr != nil {
			logger.LogAttrs(context.Background(), slog.LevelDebug, "writing problem", append(ids, slog.Any("error", werr))...)
		}
	}
}

// toProblem maps any error of a request made with method to the problem to
// send.
func toProblem(err error, method string) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLargeProblem(mbe.Limit)
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromHTTPError(he)
	}
	writes := method != http.MethodGet && method != http.MethodHead
	if database.Unreachable(err) {
		return storeUnavailable("the database cannot be reached at the moment",
			writes, "a write may or may not have been recorded; ")
	}
	if OutOfRoom(err) {
		return storeUnavailable("the server cannot store content at the moment (out of disk space or open files)", writes, "")
	}
	return internalProblem()
}

// storeUnavailable is the 503 for a store that will take writes again: the
// client retries after Retry-After, and a write retries under its
// Idempotency-Key (recorded, says whether it may have been recorded).
func storeUnavailable(why string, write bool, recorded string) *Problem {
	detail := why + "; retry after Retry-After seconds"
	if write {
		detail += " (" + recorded + "a send repeated with the same Idempotency-Key is recorded once)"
	}
	p := NewProblem(http.StatusServiceUnavailable, "store_unavailable", detail)
	p.RetryAfter = 5 * time.Second
	return p
}

// OutOfRoom reports whether err is the machine running out of a resource
// that comes back by itself or by an operator's hand, not a fault of the
// request or the code: a full disk or quota, a file system turned
// read-only, or no file descriptor left (the blob directory, say). A
// request refused for it may be sent again.
func OutOfRoom(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EMFILE, syscall.ENFILE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// heldTooLong is the 503 for a request whose body could no longer be read
// because the server held it past the read timeout first, waiting on the
// database: nothing was recorded, and the same request may be sent again.
func heldTooLong() *Problem {
	p := NewProblem(http.StatusServiceUnavailable, "store_unavailable",
		"the request waited on the database longer than its body may take to arrive, and nothing was recorded; retry after Retry-After seconds")
	p.RetryAfter = 5 * time.Second
	return p
}

func internalProblem() *Problem {
	return NewProblem(http.StatusInternalServerError, "internal_error",
		"an unexpected error occurred; quote the request_id when reporting it")
}

// fromHTTPError maps echo's errors (router 404/405, echo middleware) to problems.
func fromHTTPError(he *echo.HTTPError) *Problem {
	status := he.Code
	if status < 400 || status > 599 {
		return internalProblem()
	}
	if status >= 500 {
		if status == http.StatusInternalServerError {
			return internalProblem()
		}
		return NewProblem(status, statusCode(status), "the service cannot handle the request right now")
	}
	detail, _ := he.Message.(string)
	if detail == "" || detail == http.StatusText(status) {
		switch status {
		case http.StatusNotFound:
			detail = "no such resource"
		case http.StatusMethodNotAllowed:
			detail = "the method is not allowed on this resource"
		case http.StatusRequestEntityTooLarge:
			detail = "the request body is too large"
		default:
			detail = http.StatusText(status)
		}
	}
	return NewProblem(status, statusCode(status), detail)
}

// statusCode is the problem code used for a bare HTTP status.
func statusCode(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "payload_too_large"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case http.StatusUnprocessableEntity:
		return "validation_failed"
	case http.StatusInternalServerError:
		return "internal_error"
	}
	text := http.StatusText(status)
	if text == "" {
		return "error"
	}
	// "Method Not Allowed" -> "method_not_allowed"
	text = strings.ToLower(text)
	text = strings.NewReplacer(" ", "_", "-", "_", "'", "").Replace(text)
	return text
}

// seconds is n seconds in words: "1 second", "2 seconds".
func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return fmt.Sprintf("%d seconds", n)
}
