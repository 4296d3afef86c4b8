package app

import (
	"time"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/views"
)

// RenderDomain shows a domain as the API does, at the app's clock.
func (a *App) RenderDomain(st sendingdomain.State) views.Domain {
	return views.DomainOf(st, a.Now(), time.Duration(a.Config.DKIMRotationDays)*24*time.Hour)
}
