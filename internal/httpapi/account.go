package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
	"github.com/mailroom/mailroom/readapi"
)

// Account is the API's view of the caller's account.
type Account struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Name          string       `json:"name"`
	Status        string       `json:"status"`
	RetentionDays int          `json:"retention_days"` // the account's own, or the server's default
	CreatedAt     apitime.Time `json:"created_at"`
}

func (h handlers) account(a readapi.Account) Account {
	days := h.defaultRetention
	if a.RetentionDays != nil {
		days = *a.RetentionDays
	}
	return Account{ID: a.ID, Object: "account", Name: a.Name, Status: a.Status, RetentionDays: days, CreatedAt: apitime.Of(a.CreatedAt)}
}

func (h handlers) getAccount(c echo.Context) error {
	a, err := h.reads.Account(c.Request().Context(), authn.From(c).AccountID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.account(a))
}

type updateAccountRequest struct {
	RetentionDays nullable[int] `json:"retention_days"`
}

// nullable is a field a PATCH may leave out, set to null (back to the
// default) or set to a value.
type nullable[T any] struct {
	Given bool
	Value *T
}

func (n *nullable[T]) UnmarshalJSON(b []byte) error {
	n.Given = true
	return json.Unmarshal(b, &n.Value)
}

// updateAccount changes the account's settings: today its retention.
func (h handlers) updateAccount(c echo.Context) error {
	var req updateAccountRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	if !req.RetentionDays.Given {
		return validationOf(&httpserver.FieldError{Field: "retention_days", Message: "is required (null: the server's default)"})
	}
	ctx, id := c.Request().Context(), authn.From(c).AccountID
	if err := h.commands.SetRetention(ctx, id, req.RetentionDays.Value, meta(c)); err != nil {
		return err
	}
	return h.getAccount(c)
}

type erasureRequest struct {
	Email string `json:"email"`
}

// createErasure erases every email of the account sent to one address.
func (h handlers) createErasure(c echo.Context) error {
	var req erasureRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	er, err := h.commands.EraseRecipient(c.Request().Context(), authn.From(c).AccountID, req.Email, meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, views.ErasureOf(er.ID, er.EmailIDs, er.CreatedAt))
}
