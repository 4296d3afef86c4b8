package httpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// serve runs one request through e in-process.
func serve(e *echo.Echo, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func TestQueryInt(t *testing.T) {
	cases := []struct {
		query string
		want  int
		bad   bool
	}{
		{"", 20, false},
		{"per_page=", 20, false},
		{"per_page=1", 1, false},
		{"per_page=50", 50, false},
		{"per_page=100", 100, false},
		{"per_page=101", 100, false},
		{"per_page=100000", 100, false},
		{"per_page=99999999999999999999999", 100, false},
		{"per_page=0", 0, true},
		{"per_page=-5", 0, true},
		{"per_page=-99999999999999999999999", 0, true},
		{"per_page=abc", 0, true},
		{"per_page=1.5", 0, true},
		{"per_page=%201", 0, true},
	}
	e := echo.New()
	for _, tc := range cases {
		c := e.NewContext(httptest.NewRequest("GET", "/?"+tc.query, nil), httptest.NewRecorder())
		got, ferr := QueryInt(c, "per_page", 20, 100)
		if tc.bad {
			if ferr == nil || ferr.Field != "per_page" || ferr.Message != "must be a positive integer" {
				t.Errorf("%q: got %d, %v; want field error", tc.query, got, ferr)
			}
			continue
		}
		if ferr != nil || got != tc.want {
			t.Errorf("%q: got %d, %v; want %d", tc.query, got, ferr, tc.want)
		}
	}
}

// A page is answered as asked: one past what the API echoes exactly is
// refused, not lowered.
func TestQueryIntAtMostRefusesAboveMax(t *testing.T) {
	e := echo.New()
	for query, want := range map[string]any{
		"page=7": 7, "page=1000": 1000, "page=1001": "must be at most 1000",
		"page=99999999999999999999999": "must be at most 1000", "page=0": "must be a positive integer",
	} {
		c := e.NewContext(httptest.NewRequest("GET", "/?"+query, nil), httptest.NewRecorder())
		got, ferr := QueryIntAtMost(c, "page", 1, 1000)
		switch w := want.(type) {
		case int:
			if ferr != nil || got != w {
				t.Errorf("%q: got %d, %v; want %d", query, got, ferr, w)
			}
		case string:
			if ferr == nil || ferr.Field != "page" || ferr.Message != w {
				t.Errorf("%q: got %d, %v; want %q", query, got, ferr, w)
			}
		}
	}
}

func TestQueryIntValidationResponse(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/list", func(c echo.Context) error {
			var errs []FieldError
			perPage, ferr := QueryInt(c, "per_page", 20, 100)
			if ferr != nil {
				errs = append(errs, *ferr)
			}
			limit, ferr := QueryInt(c, "limit", 25, 100)
			if ferr != nil {
				errs = append(errs, *ferr)
			}
			if len(errs) > 0 {
				return Validation(errs...)
			}
			return c.JSON(http.StatusOK, map[string]int{"per_page": perPage, "limit": limit})
		})
	})
	res := s.get(t, "/list?per_page=500")
	if res.status != 200 || strings.TrimSpace(string(res.body)) != `{"limit":25,"per_page":100}` {
		t.Errorf("clamp: %d %s", res.status, res.body)
	}
	res = s.get(t, "/list?per_page=0&limit=x")
	p := res.problem(t)
	if res.status != 422 || p.Code != "validation_failed" || len(p.Errors) != 2 ||
		p.Errors[0] != (FieldError{"per_page", "must be a positive integer"}) || p.Errors[1].Field != "limit" {
		t.Errorf("422: %d %s", res.status, res.body)
	}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// A query parameter given twice (?status=sent&status=bounced) is a 422
// naming it, not quietly answered with one of the two values.
func TestQueryGivenTwiceIsRefused(t *testing.T) {
	e := echo.New()
	c := e.NewContext(httptest.NewRequest("GET", "/?per_page=5&per_page=10&status=sent&status=bounced&q=x", nil), httptest.NewRecorder())
	if n, ferr := QueryInt(c, "per_page", 20, 100); ferr == nil || ferr.Field != "per_page" || ferr.Message != "must be given once" {
		t.Errorf("per_page twice: %d, %v; want \"must be given once\"", n, ferr)
	}
	if v, ferr := Query(c, "status"); ferr == nil || ferr.Field != "status" || ferr.Message != "must be given once" || v != "" {
		t.Errorf("status twice: %q, %v; want \"must be given once\"", v, ferr)
	}
	if v, ferr := Query(c, "q"); ferr != nil || v != "x" {
		t.Errorf("q once: %q, %v", v, ferr)
	}
	if v, ferr := Query(c, "absent"); ferr != nil || v != "" {
		t.Errorf("absent: %q, %v", v, ferr)
	}
}
