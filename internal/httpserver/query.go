package httpserver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Query reads a query parameter. One given more than once is a FieldError
// for the caller to collect into Validation: taking either value would
// quietly answer another question than the client asked (filters given
// twice are not combined).
func Query(c echo.Context, name string) (string, *FieldError) {
	switch vs := c.QueryParams()[name]; len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	default:
		return "", &FieldError{Field: name, Message: "must be given once"}
	}
}

// QueryInt reads a positive integer query parameter. Absent or empty gives
// def; above max gives max (clamped); anything else that is not a positive
// integer gives a FieldError for the caller to collect into Validation.
func QueryInt(c echo.Context, name string, def, max int) (int, *FieldError) {
	return queryInt(c, name, def, max, true)
}

// QueryIntAtMost is QueryInt for a parameter that is answered as asked,
// never lowered (a page number): above max is a FieldError too.
func QueryIntAtMost(c echo.Context, name string, def, max int) (int, *FieldError) {
	return queryInt(c, name, def, max, false)
}

func queryInt(c echo.Context, name string, def, max int, clamp bool) (int, *FieldError) {
	raw, bad := Query(c, name)
	if bad != nil {
		return 0, bad
	}
	if raw == "" {
		return def, nil
	}
	above := func() (int, *FieldError) {
		if clamp {
			return max, nil
		}
		return 0, &FieldError{Field: name, Message: fmt.Sprintf("must be at most %d", max)}
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		// A positive number too large for int is still "above max".
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(raw, "-") {
			return above()
		}
		return 0, &FieldError{Field: name, Message: "must be a positive integer"}
	}
	if n <= 0 {
		return 0, &FieldError{Field: name, Message: "must be a positive integer"}
	}
	if n > max {
		return above()
	}
	return n, nil
}
