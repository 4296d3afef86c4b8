package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// apiTimestamp is the one timestamp format of the API and the CLI's --json.
var apiTimestamp = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// run executes the mailroom command line in-process. Blobs and the outbox
// go to a temporary directory unless args name them: the defaults are
// under the working directory, the package's source.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := root()
	for _, flag := range []string{"--blob-dir", "--sandbox-outbox"} {
		if !slices.Contains(args, flag) {
			args = append(args, flag, filepath.Join(t.TempDir(), flag[2:]))
		}
	}
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestOperatorCommands(t *testing.T) {
	db := pgtest.NewURL(t)
	dataDir := t.TempDir()
	flags := []string{"--database-url", db, "--data-dir", dataDir, "--master-key", apptest.MasterKey}

	out, _, err := run(t, append([]string{"accounts", "create", "--name", "Acme", "--json"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	var acct struct {
		AccountID string `json:"account_id"`
		Token     string `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &acct); err != nil || acct.AccountID == "" || !strings.HasPrefix(acct.Token, "mrt_") {
		t.Fatalf("accounts create --json printed %q (%v)", out, err)
	}

	out, _, err = run(t, append([]string{"tokens", "create", "--account", acct.AccountID, "--role", "org:member", "--json"}, flags...)...)
	var tok struct{ Token string }
	if err != nil || json.Unmarshal([]byte(out), &tok) != nil || !strings.HasPrefix(tok.Token, "mrt_") {
		t.Fatalf("tokens create --json printed %q (%v)", out, err)
	}
	if _, _, err := run(t, append([]string{"tokens", "create", "--account", uuid.NewString(), "--json"}, flags...)...); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("token for a missing account: %v", err)
	}
	if _, _, err := run(t, append([]string{"tokens", "create", "--account", acct.AccountID, "--role", "org:owner"}, flags...)...); err == nil {
		t.Fatal("an unknown role was accepted")
	}

	// The tokens work against a server on the same database.
	s := apptest.StartWith(t, apptest.Config(t, db))
	for _, token := range []string{acct.Token, tok.Token} {
		if r := s.Do("GET", "/api/auth/api-keys", token, nil); r.Status != 200 {
			t.Fatalf("token from the CLI: %d %s", r.Status, r.Body)
		}
	}
	key := s.Do("POST", "/api/auth/api-keys", acct.Token, map[string]any{"name": "k"}).JSON(t)["key"].(string)

	if _, _, err := run(t, append([]string{"accounts", "suspend", acct.AccountID}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != 403 {
		t.Fatalf("suspended account: %d", r.Status)
	}
	if _, _, err := run(t, append([]string{"accounts", "reinstate", acct.AccountID}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != 200 {
		t.Fatalf("reinstated account: %d", r.Status)
	}

	out, _, err = run(t, append([]string{"domains", "import", "--legacy-dkim", "Legacy.Example", "--account", acct.AccountID, "--json"}, flags...)...)
	var legacy map[string]any
	if err != nil || json.Unmarshal([]byte(out), &legacy) != nil || legacy["dkim_mode"] != "legacy" || legacy["domain"] != "legacy.example" {
		t.Fatalf("domains import: %q %v", out, err)
	}
	if r := s.Do("GET", "/api/domains/"+legacy["id"].(string), acct.Token, nil); r.Status != 200 || r.JSON(t)["dkim_mode"] != "legacy" {
		t.Fatalf("imported domain over the API: %d %s", r.Status, r.Body)
	}
	// The records to publish, the MX with its priority.
	out, _, err = run(t, append([]string{"domains", "import", "--legacy-dkim", "human.example", "--account", acct.AccountID}, flags...)...)
	if err != nil || !regexp.MustCompile(`(?m)^  MX +send\.human\.example  10 feedback-smtp\.[a-z0-9-]+\.amazonses\.com$`).MatchString(out) {
		t.Fatalf("domains import: %q %v", out, err)
	}
	if _, _, err := run(t, append([]string{"domains", "import", "--legacy-dkim", "x.example", "--account", uuid.NewString()}, flags...)...); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("import into a missing account: %v", err)
	}

	// The server's runner brings every projection to the head of the log.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, err = run(t, append([]string{"projections", "status", "--json"}, flags...)...)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Projections []struct {
				Name      string
				Lag       int64
				Position  string
				UpdatedAt string `json:"updated_at"`
			}
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Projections) < 5 {
			t.Fatalf("projections status --json: %q %v", out, err)
		}
		lagging := ""
		for _, p := range st.Projections {
			if !apiTimestamp.MatchString(p.UpdatedAt) {
				t.Fatalf("%s updated_at %q is not an API timestamp", p.Name, p.UpdatedAt)
			}
			if p.Lag != 0 {
				lagging += fmt.Sprintf(" %s:%d", p.Name, p.Lag)
			}
		}
		if lagging == "" {
			// A position reads as events export prints it and takes it.
			pos := st.Projections[0].Position
			if !regexp.MustCompile(`^[0-9]+/[0-9]+$`).MatchString(pos) {
				t.Fatalf("%s position %q, want commit/prepare", st.Projections[0].Name, pos)
			}
			if _, _, err := run(t, append([]string{"events", "export", "--from", pos}, flags...)...); err != nil {
				t.Fatalf("events export --from a projection's position (%s): %v", pos, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("projections still lag:%s", lagging)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEventsVerifyAndExport(t *testing.T) {
	db := pgtest.NewURL(t)
	flags := []string{"--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey}
	out, _, err := run(t, append([]string{"accounts", "create", "--name", "Acme", "--json"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	var acct struct {
		AccountID string `json:"account_id"`
	}
	json.Unmarshal([]byte(out), &acct)
	if _, _, err := run(t, append([]string{"accounts", "create", "--name", "Other"}, flags...)...); err != nil {
		t.Fatal(err)
	}

	out, _, err = run(t, append([]string{"events", "verify"}, flags...)...)
	if err != nil || !strings.Contains(out, "ok: 4 events") {
		t.Fatalf("verify on an untouched log: %q %v", out, err)
	}

	stream := "account-" + acct.AccountID
	out, _, err = run(t, append([]string{"events", "export", "--stream", stream}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line struct {
			Stream   string
			Type     string
			Metadata map[string]string
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		if line.Stream != stream || line.Metadata["actor"] != "operator" {
			t.Fatalf("export line %q", sc.Text())
		}
		types = append(types, line.Type)
	}
	if fmt.Sprint(types) != "[AccountCreated ManagementTokenIssued]" {
		t.Fatalf("exported types %v", types)
	}

	// The whole export verifies from the file alone; an export from a
	// position anchors each stream at its first exported event; a changed
	// line is a break.
	full, _, err := run(t, append([]string{"events", "export"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	exported := filepath.Join(t.TempDir(), "export.ndjson")
	writeFile := func(content string) {
		if err := os.WriteFile(exported, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(full)
	if out, _, err := run(t, "events", "verify", "--file", exported); err != nil || out != "ok: 4 events, every hash chain intact\n" {
		t.Fatalf("verify --file of an export: %q %v", out, err)
	}
	if _, _, err := run(t, append([]string{"events", "export", "--stream", "apikey-nope"}, flags...)...); err == nil || !strings.Contains(err.Error(), "--stream apikey-nope: no such stream") {
		t.Fatalf("export of a stream that does not exist: %v", err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(full, "\n"), "\n")
	var first struct{ Position string }
	json.Unmarshal([]byte(lines[0]), &first)
	partial, _, err := run(t, append([]string{"events", "export", "--from", first.Position}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(partial)
	if out, _, err := run(t, "events", "verify", "--file", exported, "--partial"); err != nil || !strings.HasPrefix(out, "ok: 3 events, every hash chain intact (1 stream(s) exported from past") {
		t.Fatalf("verify --file --partial of an export from a position: %q %v", out, err)
	}
	// Without --partial, a stream whose first events are missing is a
	// break: lines cut from the top of a whole export do not pass.
	if out, _, err := run(t, "events", "verify", "--file", exported); err == nil || !strings.Contains(out, "revision 1 where 0 was expected") {
		t.Fatalf("verify --file of an export lacking a stream's first event: %q %v", out, err)
	}
	// A changed line is a break, and so is a line whose hash was blanked
	// (it cannot pass for the anchor of a partial export).
	writeFile(strings.Replace(full, "Acme", "Evil", 1))
	if out, _, err := run(t, "events", "verify", "--file", exported); err == nil || !strings.Contains(out, "BROKEN stream "+stream+" revision 0") {
		t.Fatalf("verify --file of a changed export: %q %v", out, err)
	}
	blanked := regexp.MustCompile(`"hash":"[0-9a-f]{64}"`).ReplaceAllString(partial, `"hash":""`)
	writeFile(strings.Replace(blanked, "Acme", "Evil", -1))
	if out, _, err := run(t, "events", "verify", "--file", exported, "--partial"); err == nil || !strings.Contains(out, "is not a SHA-256") {
		t.Fatalf("verify --file --partial of blanked hashes: %q %v", out, err)
	}

	// Tamper with one stored event.
	s := apptest.StartWith(t, apptest.Config(t, db))
	tag, err := s.Pool.Exec(context.Background(),
		`UPDATE events SET data = replace(data::text, 'Acme', 'Evil')::json WHERE stream_id = $1 AND stream_revision = 0`, stream)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tamper: %v %v", tag, err)
	}
	out, _, err = run(t, append([]string{"events", "verify"}, flags...)...)
	if err == nil {
		t.Fatalf("verify passed a tampered log: %q", out)
	}
	if !strings.Contains(out, stream) {
		t.Fatalf("verify output does not name the stream %s: %q", stream, out)
	}
}

// The commands that work on what is there refuse a database that does not
// exist rather than create an empty one (whose log would verify).
func TestInspectionsNeedAnExistingDatabase(t *testing.T) {
	name := "mailroom_test_missing_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	u, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	flags := []string{"--database-url", u.String(), "--data-dir", t.TempDir()}
	for _, args := range [][]string{{"events", "verify"}, {"events", "export"}, {"projections", "status"}, {"projections", "rebuild", "--all"},
		{"erase", "--account", "x", "--recipient", "a@example.org"}, {"tokens", "create", "--account", "x"}, {"accounts", "suspend", "x"}} {
		if _, _, err := run(t, append(args, flags...)...); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%v on a missing database: %v", args, err)
		}
	}
	exists, err := database.Exists(context.Background(), u.String())
	if err != nil || exists {
		t.Fatalf("the missing database exists after the commands: %v %v", exists, err)
	}
}

// TestRebuildWhileServing rebuilds every projection over 100,000 events
// while requests keep arriving, and checks each answer.
func TestRebuildWhileServing(t *testing.T) {
	s := apptest.Start(t)
	ctx := context.Background()
	_, admin := s.Account("Acme")
	var keys []string
	for i := range 5 {
		keys = append(keys, s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": fmt.Sprint("key ", i)}).JSON(t)["key"].(string))
	}

	// 100,000 events: one busy account stream, appended in chunks.
	bulk := uuid.NewString()
	stream := account.Stream(bulk)
	now := time.Now()
	const total, chunk = 100_000, 1_000
	var expected = eventstore.NoStream
	for done := 0; done < total; done += chunk {
		var evs []domain.Event
		for i := range chunk {
			if done+i == 0 {
				evs = append(evs, &account.Created{AccountID: bulk, Name: "bulk", CreatedAt: now})
				continue
			}
			evs = append(evs, &account.TokenIssued{AccountID: bulk, TokenID: uuid.NewString(), Role: account.RoleMember, TokenHash: uuid.NewString(), IssuedAt: now})
		}
		data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Store.Append(ctx, stream, expected, data...)
		if err != nil {
			t.Fatal(err)
		}
		expected = eventstore.Exact(res.NextRevision)
	}
	waitForLag(t, s, 0)

	// Requests during the rebuild: reads must always answer correctly, and a
	// key created mid-rebuild must survive the swap.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var requests, failures atomic.Int64
	var createdMid atomic.Bool
	var failMu sync.Mutex
	var firstFailure string
	fail := func(msg string) {
		failures.Add(1)
		failMu.Lock()
		if firstFailure == "" {
			firstFailure = msg
		}
		failMu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			want := 5
			if createdMid.Load() {
				want = 6
			}
			r := s.Do("GET", "/api/auth/api-keys", admin, nil)
			requests.Add(1)
			if r.Status != 200 {
				fail(fmt.Sprintf("list keys: %d %s", r.Status, r.Body))
			} else if n := len(r.JSON(t)["data"].([]any)); n != want {
				fail(fmt.Sprintf("list keys: %d keys, want %d", n, want))
			}
			if r := s.Do("GET", "/v1/emails", keys[i%len(keys)], nil); r.Status != 200 {
				fail(fmt.Sprintf("list emails: %d %s", r.Status, r.Body))
			}
			requests.Add(1)
			if i == 20 {
				if r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "mid-rebuild"}); r.Status != 201 {
					fail(fmt.Sprintf("create key: %d %s", r.Status, r.Body))
				} else {
					createdMid.Store(true)
				}
			}
		}
	}()

	out, errOut, err := run(t, "projections", "rebuild", "--all", "--database-url", s.DatabaseURL, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, errOut)
	}
	for _, name := range []string{"accounts", "api_keys", "emails"} {
		if !strings.Contains(out, "rebuilt "+name) {
			t.Errorf("rebuild output lacks %q: %q", "rebuilt "+name, out)
		}
	}
	// Not a terminal: progress as lines, not a bar's redrawn frames.
	if !regexp.MustCompile(`(?m)^rebuild accounts: \d+ of \d+ events$`).MatchString(errOut) || strings.Contains(errOut, "\r") {
		t.Errorf("no progress lines on stderr: %q", errOut)
	}
	if failures.Load() > 0 {
		t.Fatalf("%d of %d requests failed during the rebuild; first: %s", failures.Load(), requests.Load(), firstFailure)
	}
	if requests.Load() < 20 || !createdMid.Load() {
		t.Fatalf("only %d requests ran during the rebuild (key created mid-way: %v)", requests.Load(), createdMid.Load())
	}
	var tokens int
	s.Pool.QueryRow(ctx, "SELECT count(*) FROM management_tokens WHERE account_id = $1", bulk).Scan(&tokens)
	if tokens != total-1 {
		t.Fatalf("rebuilt management_tokens has %d rows of the bulk account, want %d", tokens, total-1)
	}
	if n := len(s.Do("GET", "/api/auth/api-keys", admin, nil).JSON(t)["data"].([]any)); n != 6 {
		t.Fatalf("after rebuild: %d keys, want 6", n)
	}
	waitForLag(t, s, 0)
}

// waitForLag waits until no projection lags more than want events. It
// gives up only when the lag has not gone down for a minute: a slow machine
// projects the bulk slowly, but it projects.
func waitForLag(t *testing.T, s *apptest.Server, want int64) {
	t.Helper()
	best := int64(-1)
	stalled := time.Now().Add(60 * time.Second)
	for {
		st, err := s.Runner.Status(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var lag int64
		for _, p := range st {
			lag += max(0, p.Lag-want)
		}
		if lag == 0 {
			return
		}
		if best < 0 || lag < best {
			best, stalled = lag, time.Now().Add(60*time.Second)
		}
		if time.Now().After(stalled) {
			t.Fatalf("projections lag and have made no progress for a minute: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A first start that cannot serve (its address taken, its database pool
// too small) stops before it bootstraps: it prints no credentials a server
// never served, and the next start is still the first, which prints them.
func TestFirstStartThatCannotServePrintsNothing(t *testing.T) {
	db := pgtest.NewURL(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dataDir := t.TempDir()
	out, _, err := run(t, "serve", "--bootstrap", "--http-addr", taken.Addr().String(), "--database-url", db,
		"--data-dir", dataDir, "--master-key", apptest.MasterKey, "--dns-resolvers", "127.0.0.1:9")
	if err == nil || !strings.Contains(err.Error(), "MAILROOM_HTTP_ADDR") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a taken address: %v", err)
	}
	if out != "" {
		t.Fatalf("printed on a start that could not serve:\n%s", out)
	}
	// Nor does a start whose database pool is too small for its roles.
	small := db + "&pool_max_conns=2"
	if !strings.Contains(db, "?") {
		small = db + "?pool_max_conns=2"
	}
	out, _, err = run(t, "serve", "--bootstrap", "--http-addr", "127.0.0.1:0", "--database-url", small,
		"--data-dir", dataDir, "--master-key", apptest.MasterKey, "--dns-resolvers", "127.0.0.1:9")
	if err == nil || out != "" {
		t.Fatalf("serve with a pool too small: %v, printed %q", err, out)
	}
	pool, err := database.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Both stop before the read models are prepared, so there may be no
	// accounts table at all.
	var table *string
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass('accounts')::text").Scan(&table); err != nil {
		t.Fatal(err)
	}
	var accounts int
	if table != nil {
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM accounts").Scan(&accounts); err != nil || accounts != 0 {
			t.Fatalf("accounts after the failed start: %d (%v)", accounts, err)
		}
	}
}

// A command run where no development key is kept, on a database used
// with another key, is refused and leaves no key behind for the next
// command to take up.
func TestCommandElsewhereLeavesNoKeyBehind(t *testing.T) {
	t.Setenv("MAILROOM_MASTER_KEY", "")
	db := pgtest.NewURL(t)
	if _, _, err := run(t, "accounts", "create", "--name", "Acme", "--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	_, _, err := run(t, "projections", "status", "--database-url", db, "--data-dir", elsewhere, "--blob-dir", filepath.Join(elsewhere, "blobs"))
	if !errors.Is(err, datakeys.ErrWrongMasterKey) || !strings.Contains(err.Error(), "no development key was found") {
		t.Fatalf("a command with no key on a database used with one: %v", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "master.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key was left behind: %v", err)
	}
}

// --partial describes an export; the store itself is verified whole, so
// the flag without --file is refused rather than ignored.
func TestVerifyPartialNeedsAnExport(t *testing.T) {
	flags := []string{"--database-url", pgtest.NewURL(t), "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey}
	_, _, err := run(t, append([]string{"events", "verify", "--partial"}, flags...)...)
	if err == nil || !strings.Contains(err.Error(), "--partial applies to an export given with --file") {
		t.Fatalf("verify --partial without --file: %v", err)
	}
}

// The first start names the address of its API, and only when it has one:
// a process without the api role answers nothing there.
func TestTheFirstStartsBannerNamesTheAPIOnlyWhereThereIsOne(t *testing.T) {
	first := &app.FirstRun{AccountID: "acct", AdminToken: "mrt_x", APIKey: "mr_y", Domain: "example.test"}
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "Mailroom is ready at http://127.0.0.1:8080 — first start, so here are your credentials.",
		"":               "this process serves no API: use a process with the api role",
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		printFirstRun(cmd, first, addr)
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "API key      mr_y") {
			t.Errorf("banner for %q:\n%s\nwant %q", addr, out.String(), want)
		}
		if addr == "" && strings.Contains(out.String(), "http://") {
			t.Errorf("a process without the api role names an address:\n%s", out.String())
		}
		// A later start tells how to get credentials again.
		out.Reset()
		printLaterRun(cmd, "acct", addr)
		if !strings.Contains(out.String(), "mailroom tokens create --account acct --role org:admin") ||
			(addr != "") != strings.Contains(out.String(), "ready at http://"+addr) {
			t.Errorf("later start's banner for %q:\n%s", addr, out.String())
		}
	}
}

// A command group given no known command fails, as the top level does, so
// a script's typo is no success; called alone it shows its help.
func TestAnUnknownSubcommandFails(t *testing.T) {
	for _, args := range [][]string{{"accounts", "list"}, {"projections", "stauts"}, {"api-keys", "delete", "x"}} {
		out, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown command %q for \"mailroom %s\"", args[1], args[0])) || out != "" {
			t.Errorf("mailroom %s: %v, printed %q", strings.Join(args, " "), err, out)
		}
	}
	if _, _, err := run(t, "projections", "stauts"); err == nil || !strings.Contains(err.Error(), "did you mean status?") {
		t.Errorf("no suggestion for a typo: %v", err)
	}
	if _, _, err := run(t, "completion", "bogus"); err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`) {
		t.Errorf("mailroom completion bogus: %v", err)
	}
	for _, args := range [][]string{{"accounts"}, {"accounts", "help"}} {
		out, _, err := run(t, args...)
		if err != nil || !strings.Contains(out, "Available Commands:") || !strings.Contains(out, "suspend") {
			t.Errorf("mailroom %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
