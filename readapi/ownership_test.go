package readapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/projections"
)

// TestOnlyProjectionsAndReadapiQueryReadModels keeps the read models' SQL
// in two places: the projectors that write the tables and readapi that
// reads them. Code anywhere else asks readapi, so a change of a table
// touches two packages, not every package that once needed a column.
// Tests may look at the tables directly to check what a user would see.
func TestOnlyProjectionsAndReadapiQueryReadModels(t *testing.T) {
	var tables []string
	for _, p := range projections.All(datakeys.AddressKeys{}) {
		tables = append(tables, p.Tables()...)
	}
	sql := regexp.MustCompile(`\b(FROM|JOIN|UPDATE|INTO|TABLE)\s+(public\.)?(` + strings.Join(tables, "|") + `)\b`)

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{"projections": true, "readapi": true}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if owners[rel] || (path != root && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil {
				if m := sql.FindString(s); m != "" {
					t.Errorf("%s: %q queries a read model outside projections and readapi; add a query to readapi", fset.Position(lit.Pos()), m)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked under %s: the walk missed the module", checked, root)
	}
}
