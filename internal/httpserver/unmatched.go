package httpserver

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
)

// Unmatched answers a request under a group that none of its routes took:
// 405 with Allow when the path is a route for other methods, else 404.
//
// A group with middleware sends every path it does not route to a
// catch-all, so that its middleware (authentication first) runs; that
// catch-all would answer 404 where echo alone answers 405. Register it
// with g.RouteNotFound("/*", Unmatched(e)) once the routes are added.
func Unmatched(e *echo.Echo) echo.HandlerFunc {
	var once sync.Once
	var routes map[string]bool // "METHOD path pattern"
	return func(c echo.Context) error {
		once.Do(func() {
			routes = map[string]bool{}
			for _, r := range e.Routes() {
				routes[r.Method+" "+r.Path] = true
			}
		})
		req := c.Request()
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if m == req.Method {
				continue
			}
			probe := e.NewContext(req, nil)
			e.Router().Find(m, echo.GetPath(req), probe)
			if routes[m+" "+probe.Path()] && wholeParams(probe) {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			return echo.ErrNotFound
		}
		c.Response().Header().Set("Allow", strings.Join(allow, ", "))
		return NewProblem(http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf(
			"%s is not allowed on this resource; it takes %s", req.Method, strings.Join(allow, ", ")))
	}
}

// wholeParams reports whether a match's path parameters are each one
// whole segment: echo lets the last one take a trailing slash or more
// ("/emails/send/" as the email "send/"), which is no route.
func wholeParams(c echo.Context) bool {
	for _, v := range c.ParamValues() {
		if v == "" || strings.Contains(v, "/") {
			return false
		}
	}
	return true
}
