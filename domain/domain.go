// Package domain holds what every aggregate shares: the event interface and
// the errors that decisions return. Aggregates live in sub-packages. Nothing
// under domain/ performs I/O or reads a clock: time and randomness are passed
// in by the caller.
package domain

import (
	"errors"
	"fmt"
	"strings"
)

// Event is a fact an aggregate decided. Its JSON form is stored in the event
// store under the name EventType returns.
type Event interface {
	EventType() string
}

// FieldError names one invalid input field.
type FieldError struct {
	Field   string
	Message string
}

// ValidationError is a decision refused because of invalid input.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		parts[i] = f.Field + ": " + f.Message
	}
	return "validation failed: " + strings.Join(parts, "; ")
}

// Add records a field error.
func (e *ValidationError) Add(field, format string, args ...any) {
	e.Errors = append(e.Errors, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// OrNil returns e when it holds errors, nil otherwise.
func (e *ValidationError) OrNil() error {
	if len(e.Errors) == 0 {
		return nil
	}
	return e
}

// ErrNotFound means the aggregate does not exist (or is not visible to the
// caller, which the API does not distinguish).
var ErrNotFound = errors.New("not found")

// ConflictError is a decision refused because of the aggregate's state.
type ConflictError struct {
	Code   string
	Detail string
}

func (e *ConflictError) Error() string { return e.Detail }

// ForbiddenError is a decision the caller may not make.
type ForbiddenError struct {
	Code   string
	Detail string
}

func (e *ForbiddenError) Error() string { return e.Detail }
