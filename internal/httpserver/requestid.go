package httpserver

import (
	"context"
	"crypto/rand"

	"github.com/labstack/echo/v4"
)

// HeaderRequestID carries the request id in both directions.
const HeaderRequestID = "X-Request-Id"

const requestIDKey = "mailroom.request_id"

type requestIDCtxKey struct{}

// RequestID takes a sane incoming X-Request-Id or generates one, sets it on
// the response before anything else can fail, and stores it in the echo
// context and in the request's context.Context.
func RequestID() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			id := req.Header.Get(HeaderRequestID)
			if !validRequestID(id) {
				id = NewRequestID()
			}
			c.Response().Header().Set(HeaderRequestID, id)
			c.Set(requestIDKey, id)
			c.SetRequest(req.WithContext(WithRequestID(req.Context(), id)))
			return next(c)
		}
	}
}

// NewRequestID returns a fresh id: "req_" and 26 random base32 characters.
func NewRequestID() string {
	return "req_" + rand.Text()
}

// WithRequestID returns ctx carrying id, for work started outside a request.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDCtxKey{}, id)
}

// RequestIDFrom returns the request id stored in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDCtxKey{}).(string)
	return id
}

// RequestIDOf returns the request id of c, or "" when RequestID did not run.
func RequestIDOf(c echo.Context) string {
	if id, ok := c.Get(requestIDKey).(string); ok {
		return id
	}
	if id := RequestIDFrom(c.Request().Context()); id != "" {
		return id
	}
	return c.Response().Header().Get(HeaderRequestID)
}

// validRequestID accepts 1..128 characters of [A-Za-z0-9._-], so a client's
// id is safe to echo in headers and logs.
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}
