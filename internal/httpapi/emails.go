package httpapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/readapi"
)

type sendRequest struct {
	From        string                    `json:"from"`
	To          httpserver.StringOrList   `json:"to"`
	Cc          httpserver.StringOrList   `json:"cc"`
	Bcc         httpserver.StringOrList   `json:"bcc"`
	ReplyTo     httpserver.StringOrList   `json:"reply_to"`
	Subject     string                    `json:"subject"`
	HTML        string                    `json:"html"`
	Text        string                    `json:"text"`
	Tags        map[string]string         `json:"tags"`
	Attachments []commands.SendAttachment `json:"attachments"`
	// Not taken: other mail APIs schedule a send with it, and ignored like
	// other unknown fields it would send at once what was meant for later.
	ScheduledAt json.RawMessage `json:"scheduled_at"`
}

func (h handlers) sendEmail(c echo.Context) error {
	var req sendRequest
	body, err := httpserver.ReadJSON(c, &req)
	if err != nil {
		return err
	}
	// Two keys are no key: a proxy joining them would make a third. An
	// empty one is no key either, and most likely a client's unset
	// variable: sent without one, a retry would be a second email.
	keys := c.Request().Header.Values(commands.IdempotencyKeyField)
	var v domain.ValidationError
	switch {
	case len(keys) > 1:
		v.Add(commands.IdempotencyKeyField, "must be given once, not %d times", len(keys))
	case len(keys) == 1 && keys[0] == "":
		v.Add(commands.IdempotencyKeyField, "must not be empty; leave the header out to send without one")
	}
	if at := string(req.ScheduledAt); at != "" && at != "null" && at != `""` {
		v.Add("scheduled_at", "scheduled sends are not supported; leave scheduled_at out to send now")
	}
	if err := v.OrNil(); err != nil {
		return err
	}
	acc, err := h.commands.SendEmail(c.Request().Context(), authn.From(c).AccountID, commands.SendEmail{
		From: req.From, To: req.To, Cc: req.Cc, Bcc: req.Bcc, ReplyTo: req.ReplyTo, Subject: req.Subject,
		HTML: req.HTML, Text: req.Text, Tags: req.Tags, Attachments: req.Attachments,
	}, c.Request().Header.Get(commands.IdempotencyKeyField), body, meta(c))
	if err != nil {
		return err
	}
	httpserver.AddLogAttrs(c, slog.String("email_id", acc.ID))
	return c.JSON(http.StatusAccepted, acceptedEmail{
		ID: acc.ID, Status: "queued", CreatedAt: apitime.Of(acc.CreatedAt),
		Recipients: acc.Recipients, Attachments: acc.Attachments,
	})
}

// acceptedEmail is the 202 answer to a send, its fields in the contract's order.
type acceptedEmail struct {
	ID          string       `json:"id"`
	Status      string       `json:"status"`
	CreatedAt   apitime.Time `json:"created_at"`
	Recipients  int          `json:"recipients"`
	Attachments int          `json:"attachments"`
}

// MaxPage is the highest page a list answers: the largest integer every
// JSON reader (JavaScript's numbers among them) keeps exact, so the page
// echoed in pagination is the one asked for.
const MaxPage = min(1<<53-1, math.MaxInt)

// Pagination describes a page of a list.
type Pagination struct {
	Page       int `json:"page"`
	PerPage    int `json:"per_page"`
	Total      int `json:"total"`
	TotalPages int `json:"total_pages"`
}

func (h handlers) listEmails(c echo.Context) error {
	page, pageErr := httpserver.QueryIntAtMost(c, "page", 1, MaxPage)
	perPage, perPageErr := httpserver.QueryInt(c, "per_page", 20, 100)
	from, fromErr := queryDate(c, "date_from", false)
	to, toErr := queryDate(c, "date_to", true)
	// A free string, as the contract has it: a status no email has
	// matches none.
	status, statusErr := httpserver.Query(c, "status")
	// The filter matches inside addresses, so it is no longer than one.
	recipient, recipientErr := httpserver.Query(c, "to")
	if utf8.RuneCountInString(recipient) > mailmsg.MaxAddressLength {
		recipientErr = &httpserver.FieldError{Field: "to", Message: fmt.Sprintf("must be at most %d characters, as an address is", mailmsg.MaxAddressLength)}
	}
	if err := validationOf(pageErr, perPageErr, fromErr, toErr, statusErr, recipientErr); err != nil {
		return err
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return validationOf(&httpserver.FieldError{Field: "date_to", Message: "must not be before date_from"})
	}
	list, err := h.reads.ListEmails(c.Request().Context(), authn.From(c).AccountID, readapi.EmailFilter{
		Status: status, To: recipient,
		CreatedFrom: from, CreatedBefore: to, Page: page, PerPage: perPage,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"data": list.Emails,
		"pagination": Pagination{
			Page: page, PerPage: perPage, Total: list.Total,
			TotalPages: (list.Total + perPage - 1) / perPage,
		},
	})
}

func (h handlers) getEmail(c echo.Context) error {
	e, err := h.reads.Email(c.Request().Context(), authn.From(c).AccountID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}
