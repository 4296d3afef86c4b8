package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/views"
)

func eraseCmd(cfg *config.Config) *cobra.Command {
	var accountID, recipient string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "erase",
		Short: "Erase every email of an account sent to one address, whatever its age",
		Long: `Erase every email of an account sent to one address (to, cc or bcc): its
content and attachments are deleted, its data key destroyed, and it leaves
the email list. Daily counts stay, and a suppressed address stays
suppressed. The request is recorded without the address.`,
		Args: cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			if err := blobsAtHand(cfg); err != nil {
				return err
			}
			if recipient == "-" {
				r, err := readRecipient(cmd.InOrStdin())
				if err != nil {
					return err
				}
				recipient = r
			}
			er, err := a.Commands.EraseRecipient(cmd.Context(), accountID, recipient, operator())
			if err != nil && cmd.Context().Err() != nil {
				// Stopped part way: what is erased stays erased, and the
				// same erase finishes the rest.
				return fmt.Errorf("interrupted: some emails may be erased already; run the same erase again to finish: %w", cmd.Context().Err())
			}
			if err != nil {
				return asFlags(describe(err, "account", accountID), map[string]string{"email": "--recipient"})
			}
			out := views.ErasureOf(er.ID, er.EmailIDs, er.CreatedAt)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "erasure %s: %d email(s) erased\n", out.ID, out.Erased)
			for _, id := range out.EmailIDs {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&accountID, "account", "", "account id")
	cmd.Flags().StringVar(&recipient, "recipient", "", `the address whose emails are erased; "-" reads it from standard input, which keeps it out of ps and the shell's history`)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id", "object", "erased", "email_ids", "created_at"} as JSON`)
	cmd.MarkFlagRequired("account")
	cmd.MarkFlagRequired("recipient")
	return cmd
}

// blobsAtHand refuses to erase with a blob directory that is missing or
// empty: the server stores every email's content there, so such a one
// means the command was not given the server's (run from elsewhere,
// MAILROOM_BLOB_DIR unset; any command opening the app there creates it
// empty), and the erasure would be recorded with the emails' content left
// where the server keeps it.
func blobsAtHand(cfg *config.Config) error {
	if cfg.BlobS3Bucket != "" {
		return nil
	}
	entries, err := os.ReadDir(cfg.BlobDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("%s: %s holds no content; give the blob storage the server uses, where the emails' content is deleted",
			config.Setting("blob-dir"), cfg.BlobDir)
	}
	return nil
}

// readRecipient reads the address to erase from the first line of r, so
// that it need not be on the command line, which every user of the
// machine sees (ps) and shells keep in their history. Piped in, the input
// must hold that one address: erasing the first of a list and succeeding
// would read as the whole list erased. Typed at a terminal, Enter ends it.
func readRecipient(r io.Reader) (string, error) {
	const limit = 4096
	br := bufio.NewReader(io.LimitReader(r, limit+1))
	raw, err := br.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("--recipient -: reading standard input: %w", err)
	}
	line := strings.TrimSpace(raw)
	if line == "" {
		return "", errors.New("--recipient -: standard input holds no address")
	}
	if isTerminal(r) {
		return line, nil
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		return "", fmt.Errorf("--recipient -: reading standard input: %w", err)
	}
	if strings.TrimSpace(string(rest)) != "" || len(raw)+len(rest) > limit {
		return "", errors.New("--recipient -: standard input must hold one address; erase each address with a command of its own")
	}
	return line, nil
}
