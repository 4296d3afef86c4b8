package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/mailroom/mailroom"

// TestLayers keeps HTTP out of the application and query packages: only
// this package speaks HTTP. A package may not depend on a forbidden one,
// directly or through another.
func TestLayers(t *testing.T) {
	const echo = "github.com/labstack/echo/v4"
	layers := []struct {
		pkg       string
		forbidden []string
	}{
		{module + "/commands", []string{echo, module + "/readapi", module + "/internal/httpserver", module + "/internal/authn"}},
		{module + "/readapi", []string{echo, module + "/internal/httpserver", module + "/internal/authn"}},
	}
	imports := importGraph(t, module+"/commands", module+"/readapi")
	for _, l := range layers {
		if _, ok := imports[l.pkg]; !ok {
			t.Fatalf("go list did not describe %s", l.pkg)
		}
		for _, f := range l.forbidden {
			if chain := importChain(imports, l.pkg, f); chain != nil {
				t.Errorf("%s must not import %s, directly or through another package, but does: %s",
					l.pkg, f, strings.Join(chain, " -> "))
			}
		}
	}
}

// importGraph lists the non-test imports of pkgs and of everything they
// depend on.
func importGraph(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Imports"}, pkgs...)...)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		graph[p.ImportPath] = p.Imports
	}
	return graph
}

// importChain is a shortest path of imports from pkg to target, or nil.
func importChain(graph map[string][]string, pkg, target string) []string {
	via := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var chain []string
			for ; p != ""; p = via[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, next := range graph[p] {
			if _, seen := via[next]; !seen {
				via[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}
