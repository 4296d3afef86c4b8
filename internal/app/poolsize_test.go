package app_test

import (
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
)

// A pool too small for the roles' holders (five projectors, two process
// managers of the router) is refused with the least that works.
func TestCheckPoolSize(t *testing.T) {
	for _, c := range []struct {
		roles []string
		conns int
		ok    bool
	}{
		{[]string{"api", "projections", "workers"}, 4, false},
		{[]string{"api", "projections", "workers"}, 7, false},
		{[]string{"api", "projections", "workers"}, 8, true},
		{[]string{"api", "projections"}, 5, false},
		{[]string{"api", "projections"}, 6, true},
		{[]string{"workers"}, 2, false},
		{[]string{"workers"}, 3, true},
		{[]string{"api"}, 1, true},
	} {
		err := app.CheckPoolSize(config.Config{Roles: c.roles}, c.conns, 2)
		if (err == nil) != c.ok {
			t.Errorf("roles %v, %d connections: %v, want ok %v", c.roles, c.conns, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("the refusal does not say what to change: %v", err)
		}
	}
}
