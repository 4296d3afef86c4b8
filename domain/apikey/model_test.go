package apikey_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/internal/fuzztape"
)

// modelPermissions are permission lists with what docs/decisions.md
// ("Credentials") says a key gets: both when omitted, duplicates
// collapsed in canonical order, refused (nil) when empty or unknown.
var modelPermissions = []struct {
	in   []string
	want []apikey.Permission
}{
	{nil, []apikey.Permission{apikey.SendEmails, apikey.ReadEmails}},
	{[]string{}, nil},
	{[]string{"emails:read"}, []apikey.Permission{apikey.ReadEmails}},
	{[]string{"emails:read", "emails:send", "emails:read"}, []apikey.Permission{apikey.SendEmails, apikey.ReadEmails}},
	{[]string{"emails:send", "emails:delete"}, nil},
	{[]string{"Emails:Send"}, nil},
}

var modelKeyNames = []struct{ in, kept string }{
	{"deploy", "deploy"},
	{"  ci key ", "ci key"},
	{"", ""},
	{strings.Repeat("ü", 100), strings.Repeat("ü", 100)},
	{strings.Repeat("ü", 101), ""},
	{"a\tb", ""},
}

// FuzzAPIKeyLifecycle runs any sequence of a key's creation (with any of
// the names and permission lists above) and revocation by its own account
// or another, and checks what docs/decisions.md ("Credentials") and
// docs/events.md ("API key stream") say: a key is created once, with its
// name trimmed and its permissions canonical, an invalid one creates
// nothing, another account's revoke is not found, revoking a revoked key
// records nothing, a revoked key stays revoked, and replaying the stream
// gives the live state.
func FuzzAPIKeyLifecycle(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 3, 1, 0})
	f.Add([]byte{0, 4, 1, 0, 1, 3, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		var (
			s                   apikey.State
			log                 []domain.Event
			created, revoked    bool
			wantName, gotName   string
			wantPerms, gotPerms []apikey.Permission
		)
		for step := 1; tape.More() && step < 100; step++ {
			var (
				evs  []domain.Event
				err  error
				want string
			)
			switch tape.Pick(2) {
			case 0:
				name := modelKeyNames[tape.Pick(len(modelKeyNames))]
				perms := modelPermissions[tape.Pick(len(modelPermissions))]
				evs, err = apikey.Create(s, "k1", "acct", name.in, perms.in, apikey.Secret{Hash: "h", Preview: "mr_abcdef..."}, now)
				switch {
				case created:
					var c *domain.ConflictError
					if !errors.As(err, &c) {
						t.Fatalf("step %d: created twice: %v", step, err)
					}
				case name.kept == "" || perms.want == nil:
					var v *domain.ValidationError
					if !errors.As(err, &v) {
						t.Fatalf("step %d: name %q, permissions %q: %v", step, name.in, perms.in, err)
					}
				default:
					want, wantName, wantPerms = "ApiKeyCreated", name.kept, perms.want
				}
			case 1:
				by := []string{"acct", "acct", "other"}[tape.Pick(3)]
				evs, err = apikey.Revoke(s, by, now)
				switch {
				case !created || by != "acct":
					if !errors.Is(err, domain.ErrNotFound) {
						t.Fatalf("step %d: revoked by %s, created %v: %v", step, by, created, err)
					}
				case !revoked:
					want = "ApiKeyRevoked"
				}
			}
			if err != nil && len(evs) > 0 {
				t.Fatalf("step %d: an error with events: %v %v", step, evs, err)
			}
			got := ""
			if len(evs) == 1 {
				got = evs[0].EventType()
			}
			if got != want || len(evs) > 1 {
				t.Fatalf("step %d: decided %v, want %q", step, evs, want)
			}
			for _, e := range evs {
				switch e := e.(type) {
				case *apikey.Created:
					created, gotName, gotPerms = true, e.Name, e.Permissions
				case *apikey.Revoked:
					revoked = true
				}
				s = apikey.Evolve(s, e)
				log = append(log, e)
			}
			if created && (gotName != wantName || !slices.Equal(gotPerms, wantPerms)) {
				t.Fatalf("step %d: created %q with %v, want %q with %v", step, gotName, gotPerms, wantName, wantPerms)
			}
			if s.Active != (created && !revoked) {
				t.Fatalf("step %d: active %v, created %v, revoked %v", step, s.Active, created, revoked)
			}
		}
		var replay apikey.State
		for _, e := range log {
			replay = apikey.Evolve(replay, e)
		}
		if !reflect.DeepEqual(replay, s) {
			t.Fatalf("replay %+v, live %+v", replay, s)
		}
	})
}
