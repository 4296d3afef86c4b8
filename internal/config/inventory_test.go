package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// settingVariables lists the variables of every setting, as `mailroom
// serve --help` shows them.
func settingVariables(t *testing.T) map[string]bool {
	t.Helper()
	var c Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c.Flags(fs)
	vars := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation][0]
		if !strings.HasSuffix(f.Usage, "["+env+"]") {
			t.Errorf("--%s: the help does not end with its variable [%s]: %q", f.Name, env, f.Usage)
		}
		vars[env] = true
	})
	return vars
}

// Every MAILROOM_* name the code, the docs and the deployment files use is
// a setting's variable or one of the variables that name none on purpose
// (tests, benchmarks, the example receiver, the Compose file): any other is
// a misspelling, which serve would warn about in an operator's environment.
func TestEveryVariableNamedAnywhereIsKnown(t *testing.T) {
	vars := settingVariables(t)
	// The docs' own example of a misspelt variable.
	typos := []string{"MAILROOM_RATE_LIMT"}
	name := regexp.MustCompile(`MAILROOM_[A-Z0-9_]+`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil // tests set misspelt variables on purpose
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".example", ".sh":
		default:
			// Of the files without a known extension, only the scripts
			// (not a binary built in the tree).
			if !slices.Contains([]string{"Dockerfile", "Makefile", "run"}, filepath.Base(path)) {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range name.FindAllString(string(b), -1) {
			if !vars[v] && !notSetting(v) && !slices.Contains(typos, v) {
				t.Errorf("%s names %s, which is no setting and would be warned about as misspelt", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every setting is described in the README or the operations guide,
// besides the help and the example env file.
func TestEverySettingIsDocumented(t *testing.T) {
	var docs strings.Builder
	for _, f := range []string{"README.md", "docs/operations.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	for v := range settingVariables(t) {
		if !regexp.MustCompile(`\b` + v + `\b`).MatchString(docs.String()) {
			t.Errorf("%s is in neither README.md nor docs/operations.md", v)
		}
	}
}
