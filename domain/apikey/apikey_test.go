package apikey_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
)

var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestCreatePermissions(t *testing.T) {
	cases := []struct {
		name string
		in   []string
		want []apikey.Permission
		err  bool
	}{
		{"default is both", nil, []apikey.Permission{apikey.SendEmails, apikey.ReadEmails}, false},
		{"read only", []string{"emails:read"}, []apikey.Permission{apikey.ReadEmails}, false},
		{"duplicates collapse in canonical order", []string{"emails:read", "emails:send", "emails:read"}, []apikey.Permission{apikey.SendEmails, apikey.ReadEmails}, false},
		{"empty list refused", []string{}, nil, true},
		{"unknown refused", []string{"emails:read", "emails:delete"}, nil, true},
		{"unknown first refused", []string{"emails:delete"}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := apikey.Create(apikey.State{}, "k1", "a1", "ci", tc.in, apikey.Secret{Hash: "h", Preview: "mr_abcdef..."}, now)
			if tc.err {
				var v *domain.ValidationError
				if !errors.As(err, &v) || len(v.Errors) != 1 {
					t.Fatalf("want validation error on permissions, got %v", err)
				}
				// The unknown one is named with its place in the list.
				want := domain.FieldError{Field: "permissions", Message: "must list at least one of emails:send and emails:read"}
				if i := len(tc.in) - 1; i >= 0 {
					want = domain.FieldError{Field: fmt.Sprintf("permissions.%d", i), Message: `unknown permission "emails:delete"; known: emails:send, emails:read`}
				}
				if v.Errors[0] != want {
					t.Fatalf("got %+v, want %+v", v.Errors[0], want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := evs[0].(*apikey.Created).Permissions
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("permissions = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCreateName(t *testing.T) {
	for _, name := range []string{"", "   ", string(make([]byte, 101))} {
		_, err := apikey.Create(apikey.State{}, "k1", "a1", name, nil, apikey.Secret{}, now)
		var v *domain.ValidationError
		if !errors.As(err, &v) || v.Errors[0].Field != "name" {
			t.Errorf("name %q: want validation error on name, got %v", name, err)
		}
	}
}

func TestRevoke(t *testing.T) {
	created, _ := apikey.Create(apikey.State{}, "k1", "a1", "ci", nil, apikey.Secret{}, now)
	s := apikey.Evolve(apikey.State{}, created[0])

	if _, err := apikey.Revoke(s, "other-account", now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("another account's key: want ErrNotFound, got %v", err)
	}
	if _, err := apikey.Revoke(apikey.State{}, "a1", now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("missing key: want ErrNotFound, got %v", err)
	}
	evs, err := apikey.Revoke(s, "a1", now)
	if err != nil || len(evs) != 1 {
		t.Fatalf("revoke: %v %v", evs, err)
	}
	s = apikey.Evolve(s, evs[0])
	if s.Active {
		t.Fatal("key still active after revocation")
	}
	again, err := apikey.Revoke(s, "a1", now)
	if err != nil || len(again) != 0 {
		t.Fatalf("second revoke should decide nothing, got %v %v", again, err)
	}
}

func TestKeyNameIsAtMost100PrintableCharacters(t *testing.T) {
	if _, err := apikey.Create(apikey.State{}, "k1", "a1", strings.Repeat("k", 100), nil, apikey.Secret{}, now); err != nil {
		t.Fatalf("100 characters refused: %v", err)
	}
	for name, msg := range map[string]string{
		strings.Repeat("k", 101): "must be at most 100 characters; got 101",
		"ci\x00":                 "must not contain control characters (found U+0000)",
	} {
		_, err := apikey.Create(apikey.State{}, "k1", "a1", name, nil, apikey.Secret{}, now)
		var v *domain.ValidationError
		if !errors.As(err, &v) || v.Errors[0].Field != "name" || v.Errors[0].Message != msg {
			t.Errorf("name %q: %v, want %q", name, err, msg)
		}
	}
}
