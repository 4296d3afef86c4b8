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
