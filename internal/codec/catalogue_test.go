package codec_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/codec"
)

// catalogue is the document auditors read an export with.
const catalogue = "../../docs/events.md"

// typeHeading is a section of the catalogue about one event type: a
// level-3 heading that is one word. Other headings have several words.
var typeHeading = regexp.MustCompile(`^### ([A-Za-z0-9]+)\s*$`)

// catalogueSections returns the text under each event type's heading, up
// to the next heading of any level. Lines inside fenced code blocks are
// never headings. A type with two headings is reported in twice.
func catalogueSections(doc string) (sections map[string]string, twice []string) {
	sections = map[string]string{}
	var current string
	var body strings.Builder
	flush := func() {
		if current != "" {
			sections[current] = body.String()
		}
		current = ""
		body.Reset()
	}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			flush()
			if m := typeHeading.FindStringSubmatch(line); m != nil {
				if _, seen := sections[m[1]]; seen {
					twice = append(twice, m[1])
				}
				current = m[1]
			}
			continue
		}
		if current != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	flush()
	return sections, twice
}

// jsonFields lists the JSON names of t's fields, and those of the structs
// its fields hold (through pointers, slices and maps), as encoding/json
// writes them. Types that encode themselves (time.Time) are values, not
// structs of fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || encodesItself(t) {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				walk(f.Type) // embedded: its fields are the outer object's
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
			walk(f.Type)
		}
	}
	walk(t)
	return out
}

func encodesItself(t reflect.Type) bool {
	marshaler := reflect.TypeFor[json.Marshaler]()
	text := reflect.TypeFor[encoding.TextMarshaler]()
	p := reflect.PointerTo(t)
	return t.Implements(marshaler) || p.Implements(marshaler) || t.Implements(text) || p.Implements(text)
}

// sealedNamed lists the fields of a type (among fields) that its section's
// "Sealed:" paragraph names in backticks; none when it has no such
// paragraph.
func sealedNamed(section string, fields []string) []string {
	_, rest, ok := strings.Cut(section, "\nSealed:")
	if !ok {
		return nil
	}
	paragraph, _, _ := strings.Cut(rest, "\n\n")
	var out []string
	for _, f := range fields {
		if strings.Contains(paragraph, "`"+f+"`") {
			out = append(out, f)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// The catalogue is what an auditor reads an export with, so it must not
// fall behind the code: every registered event type has a "### Type"
// section, every JSON field of its data is named there in backticks, its
// "Sealed:" paragraph names exactly the fields the codec seals, a type
// past schema version 1 names its version, and no section names a type
// that is not registered.
func TestEventCatalogueNamesEveryTypeAndField(t *testing.T) {
	doc, err := os.ReadFile(catalogue)
	if err != nil {
		t.Fatalf("the event catalogue: %v", err)
	}
	sections, twice := catalogueSections(string(doc))
	for _, typ := range twice {
		t.Errorf("docs/events.md has two sections \"### %s\"", typ)
	}
	reg := codec.Registered()
	for _, typ := range reg.Types() {
		body, ok := sections[typ]
		if !ok {
			t.Errorf("docs/events.md has no section \"### %s\"", typ)
			continue
		}
		e, err := reg.New(typ)
		if err != nil {
			t.Fatal(err)
		}
		fields := jsonFields(reflect.TypeOf(e))
		for _, field := range fields {
			if !strings.Contains(body, "`"+field+"`") {
				t.Errorf("docs/events.md, ### %s: the field %s is not named (as `%s`)", typ, field, field)
			}
		}
		var sealed []string
		if p, ok := codec.PersonalOf(typ); ok {
			sealed = p.Fields
		}
		if said := sealedNamed(body, fields); !sameSet(said, sealed) {
			t.Errorf("docs/events.md, ### %s: its \"Sealed:\" paragraph names %v; the codec seals %v", typ, said, sealed)
		}
		if v, err := reg.Version(typ); err != nil {
			t.Fatal(err)
		} else if want := fmt.Sprintf("version %d", v); v > 1 && !strings.Contains(body, want) {
			t.Errorf("docs/events.md, ### %s: does not name its schema version (%q)", typ, want)
		}
	}
	for typ := range sections {
		if _, err := reg.Version(typ); err != nil {
			t.Errorf("docs/events.md has a section \"### %s\", which is no registered event type", typ)
		}
	}
}

// The section reader must not take a shell comment in a code block for a
// heading, nor run one section into the next.
func TestCatalogueSections(t *testing.T) {
	doc := "# Events\n\n### A\n\n`a`\n\n```sh\n### C\n```\n\n### B\n`b`\n## Notes\n`c`\n### Two words\n`d`\n### A\n"
	sections, twice := catalogueSections(doc)
	if got := sections["A"]; strings.TrimSpace(got) != "" {
		t.Errorf("the last \"### A\" is empty, got %q", got)
	}
	if !slices.Equal(twice, []string{"A"}) {
		t.Errorf("twice = %v, want [A]", twice)
	}
	if got := sections["B"]; got != "`b`\n" {
		t.Errorf("section B = %q, want only its own line", got)
	}
	if len(sections) != 2 {
		t.Errorf("sections = %v, want A and B only", sections)
	}
}
