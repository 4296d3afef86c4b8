package codec

import (
	"reflect"
	"strings"
	"testing"
)

// Every field marked personal must exist on its event, and the event must
// be able to say it was erased: a misspelt name would leave data in the
// clear without any error.
func TestPersonalFieldsExistOnTheirEvents(t *testing.T) {
	for typ, p := range personal {
		e, err := registry.New(typ)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		tags := map[string]bool{}
		st := reflect.TypeOf(e).Elem()
		for i := 0; i < st.NumField(); i++ {
			name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
			tags[name] = true
		}
		for _, f := range append(append([]string{}, p.Fields...), p.KeyField, "erased") {
			if !tags[f] {
				t.Errorf("%s has no JSON field %q", typ, f)
			}
		}
		if p.AccountField != "" && !tags[p.AccountField] {
			t.Errorf("%s has no JSON field %q", typ, p.AccountField)
		}
	}
}
