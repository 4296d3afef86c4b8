package main

import (
	"errors"
	"fmt"

	"github.com/mailroom/mailroom/domain"
)

// describe turns a domain refusal into an operator-facing message.
func describe(err error, what, id string) error {
	if errors.Is(err, domain.ErrNotFound) {
		return fmt.Errorf("%s %s not found", what, id)
	}
	return err
}

// asFlags names the fields of a validation error by the flags they were
// given with (the commands share their checks with the API, whose fields
// have other names): "--recipient: ..." rather than "email: ...".
func asFlags(err error, flags map[string]string) error {
	var v *domain.ValidationError
	if !errors.As(err, &v) {
		return err
	}
	named := &domain.ValidationError{}
	for _, f := range v.Errors {
		if flag, ok := flags[f.Field]; ok {
			f.Field = flag
		}
		named.Errors = append(named.Errors, f)
	}
	return named
}
