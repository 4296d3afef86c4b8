package app

import (
	"fmt"

	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/eventstore/esdb"
	"github.com/mailroom/mailroom/internal/provider/smtp"
)

// Check refuses settings that cannot work before anything connects: a
// mistake found only once the database was created and migrated, or a
// development key generated, would leave those behind and hide behind
// whatever else went wrong. It reads the connection strings as their
// adapters will, and names the flag and variable at fault.
func Check(cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := database.CheckURL(cfg.DatabaseURL); err != nil {
		return fmt.Errorf("%s: %w", config.Setting("database-url"), err)
	}
	if cfg.EventStoreDB() {
		if err := esdb.CheckConnectionString(cfg.EventStore); err != nil {
			return fmt.Errorf("%s: %w", config.Setting("eventstore"), err)
		}
	}
	if cfg.Provider == "smtp" {
		if _, err := smtp.New(cfg.SMTPURL); err != nil {
			return fmt.Errorf("%s: %w", config.Setting("smtp-url"), err)
		}
	}
	return nil
}
