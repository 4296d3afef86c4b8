package benchrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/pgtest"
)

const (
	clients    = 32               // concurrent senders of a burst
	burstFor   = 10 * time.Second // how long a burst sends
	drainLimit = 120 * time.Second
	rssGoalMB  = 200
)

// binary is the mailroom binary the figures run: MAILROOM_BENCH_BIN (what
// `make bench` builds; a relative path is taken from the repository's
// root, where make runs), or one built here once.
var (
	binary = sync.OnceValues(func() (string, error) {
		if p := os.Getenv("MAILROOM_BENCH_BIN"); p != "" {
			if !filepath.IsAbs(p) {
				p = filepath.Join("..", "..", p) // tests run in internal/benchrun
			}
			return filepath.Abs(p)
		}
		dir, err := os.MkdirTemp("", "mailroom-bench-")
		if err != nil {
			return "", err
		}
		builtDir = dir
		bin := filepath.Join(dir, "mailroom")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/mailroom").CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build: %v\n%s", err, out)
		}
		return bin, nil
	})
	builtDir string
)

// A figure is one measured result, printed as one line with its goal.
var (
	figuresMu sync.Mutex
	figures   []string
	peaks     []peak
)

type peak struct {
	name string
	kib  int64
}

// figure prints the line of one figure and keeps it for the summary.
func figure(name, format string, args ...any) {
	line := fmt.Sprintf("figure %s: %s", name, fmt.Sprintf(format, args...))
	fmt.Println(line)
	figuresMu.Lock()
	figures = append(figures, line)
	figuresMu.Unlock()
}

// verdict says whether a figure met its goal.
func verdict(ok bool) string {
	if ok {
		return "[met]"
	}
	return "[MISSED]"
}

func TestMain(m *testing.M) {
	code := m.Run()
	figuresMu.Lock()
	if len(peaks) > 0 {
		top := slices.MaxFunc(peaks, func(a, b peak) int { return int(a.kib - b.kib) })
		mb := float64(top.kib) / 1024
		line := fmt.Sprintf("figure rss: peak %.0f MB (%s) over %d processes (goal < %d MB) %s",
			mb, top.name, len(peaks), rssGoalMB, verdict(mb < rssGoalMB))
		fmt.Println(line)
		figures = append(figures, line)
	}
	if len(figures) > 0 {
		// Other work on the machine slows every figure: say how busy it was.
		load, _ := os.ReadFile("/proc/loadavg")
		avg := strings.Fields(string(load))
		fmt.Printf("\nFigures (%d CPUs, load average over 1, 5, 15 min at the end: %s):\n",
			runtime.NumCPU(), strings.Join(avg[:min(3, len(avg))], " "))
		for _, f := range figures {
			fmt.Println("  " + f)
		}
	}
	figuresMu.Unlock()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// cluster is a fresh database with the mailroom processes serving it. Every
// process shares the data directory (master key, outbox, blobs).
type cluster struct {
	b      *testing.B
	name   string
	bin    string
	db     string
	dir    string
	outbox string
	env    []string
	procs  []*proc
	key    string // API key printed by the bootstrapping process
	api    string // base URL of the first process
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	url    string
	log    string
	exited chan struct{}
	done   bool
}

// newCluster creates a database and the settings every process of the
// cluster runs with: rate limits off, local webhooks allowed, and env.
func newCluster(b *testing.B, name string, env ...string) *cluster {
	bin, err := binary()
	if err != nil {
		b.Fatal(err)
	}
	db := pgtest.NewURL(b)
	settle(db)
	dir := dataDir(b)
	c := &cluster{b: b, name: name, bin: bin, db: db, dir: dir, outbox: filepath.Join(dir, "outbox")}
	c.env = append([]string{
		"MAILROOM_DATABASE_URL=" + db,
		"MAILROOM_DATA_DIR=" + dir,
		"MAILROOM_SANDBOX_OUTBOX=" + c.outbox,
		"MAILROOM_BLOB_DIR=" + filepath.Join(dir, "blobs"),
		"MAILROOM_PROVIDER=sandbox",
		"MAILROOM_RATE_LIMIT=0",
		"MAILROOM_IP_RATE_LIMIT=0",
		"MAILROOM_ACCOUNT_RATE_LIMIT=0",
		"MAILROOM_EGRESS_ALLOW_CIDRS=127.0.0.0/8",
		"MAILROOM_WEBHOOK_ALLOW_HTTP=true",
		"MAILROOM_DNS_RESOLVERS=127.0.0.1:9", // nothing here needs DNS
		"MAILROOM_LOG_LEVEL=warn",
	}, env...)
	// Registered after the database's cleanup, so it runs before the drop.
	b.Cleanup(c.stop)
	return c
}

// settle lets what the previous figure left behind finish before the next
// starts: PostgreSQL writes its dirty pages out (CHECKPOINT, skipped
// without the right to it), then up to 10 s pass until the CPUs are
// mostly idle for a second.
func settle(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, db); err == nil {
		conn.Exec(ctx, "CHECKPOINT")
		conn.Close(ctx)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		idle, total := cpuTimes()
		time.Sleep(time.Second)
		idle2, total2 := cpuTimes()
		if total2 > total && float64(idle2-idle)/float64(total2-total) > 0.8 {
			return
		}
	}
}

// cpuTimes is the idle and total time of all CPUs from /proc/stat, in
// clock ticks (zero where it cannot be read).
func cpuTimes() (idle, total uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			continue
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

// dataDir is a fresh directory for a cluster's files, in memory where the
// machine has /dev/shm: the sandbox writes one file per message and the
// figures measure the pipeline, not the creation of files on a disk.
func dataDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "mailroom-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// pooled is the cluster's database URL with a pool of at most conns
// connections for one process.
func (c *cluster) pooled(conns int) string {
	u, err := url.Parse(c.db)
	if err != nil {
		c.b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(conns))
	u.RawQuery = q.Encode()
	return "MAILROOM_DATABASE_URL=" + u.String()
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var keyLine = regexp.MustCompile(`API key\s+(mr_[0-9A-Za-z]+)`)

// serve starts `mailroom serve` with the cluster's settings and env, and
// waits until it serves (/healthz answers "ok", not "starting"). The first process bootstraps the
// account, its API key and the sandbox domain example.test.
func (c *cluster) serve(name string, env ...string) *proc {
	b := c.b
	addr := freeAddr(b)
	first := len(c.procs) == 0
	cmd := exec.Command(c.bin, "serve")
	cmd.Env = append(append(append(os.Environ(), c.env...), "MAILROOM_HTTP_ADDR="+addr, fmt.Sprintf("MAILROOM_BOOTSTRAP=%t", first)), env...)
	p := &proc{name: name, cmd: cmd, url: "http://" + addr, log: filepath.Join(c.dir, name+".log"), exited: make(chan struct{})}
	stdoutPath := filepath.Join(c.dir, name+".out")
	stdout, err := os.Create(stdoutPath)
	if err != nil {
		b.Fatal(err)
	}
	defer stdout.Close()
	logf, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = stdout, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.exited) }()
	c.procs = append(c.procs, p)

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-p.exited:
			b.Fatalf("%s exited on start: %s", name, tail(p.log))
		default:
		}
		if resp, err := http.Get(p.url + "/healthz"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"ok"`) { // not "starting"
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not answer /healthz in 90 s: %s", name, tail(p.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if first {
		out, _ := os.ReadFile(stdoutPath)
		m := keyLine.FindSubmatch(out)
		if m == nil {
			b.Fatalf("%s printed no API key:\n%s", name, out)
		}
		c.key, c.api = string(m[1]), p.url
	}
	return p
}

// tail is the end of a log file, for failures.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// stop ends every process (SIGTERM, then SIGKILL after 10 s) and records
// each one's peak resident memory.
func (c *cluster) stop() {
	for _, p := range c.procs {
		if p.done {
			continue
		}
		p.done = true
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		recordPeak(c.name+"/"+p.name, p.cmd.ProcessState)
	}
}

// recordPeak prints and keeps the peak resident memory of an ended
// process (its rusage maximum, VmHWM at exit).
func recordPeak(name string, st *os.ProcessState) {
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return
	}
	kib := ru.Maxrss // KiB on Linux
	fmt.Printf("rss %s: peak %.0f MB\n", name, float64(kib)/1024)
	figuresMu.Lock()
	peaks = append(peaks, peak{name, kib})
	figuresMu.Unlock()
}

// peakMB is the largest peak recorded for names starting with prefix.
func peakMB(prefix string) float64 {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	var top int64
	for _, p := range peaks {
		if strings.HasPrefix(p.name, prefix) {
			top = max(top, p.kib)
		}
	}
	return float64(top) / 1024
}

func newClient() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients},
	}
}

// do sends one API request and decodes a JSON answer into out.
func (c *cluster) do(client *http.Client, method, path, body string, out any) (int, error) {
	return c.doAs(client, c.key, method, path, body, out)
}

// doAs is do with another credential.
func (c *cluster) doAs(client *http.Client, credential, method, path, body string, out any) (int, error) {
	req, err := http.NewRequest(method, c.api+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+credential)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, err
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode, nil
}

// subscribe creates a webhook endpoint at url for types.
func (c *cluster) subscribe(url string, types ...string) {
	body, _ := json.Marshal(map[string]any{"url": url, "event_types": types})
	if _, err := c.do(newClient(), "POST", "/v1/webhooks", string(body), nil); err != nil {
		c.b.Fatal(err)
	}
}

// send queues email number i and returns its id.
func (c *cluster) send(client *http.Client, i int) (string, error) {
	body := fmt.Sprintf(`{"from":"bench@example.test","to":"user%d@example.org","subject":"bench %d","text":"hello"}`, i, i)
	var out struct{ ID string }
	if _, err := c.do(client, "POST", "/v1/emails/send", body, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// A burst is what 32 clients sending as fast as they are answered got.
type burst struct {
	start    time.Time
	took     time.Duration
	accepted []string
	sentAt   map[string]time.Time
	latency  []time.Duration // of accepted sends
	failed   int
	firstErr error
}

// burst sends from 32 clients, each on its own keep-alive connection,
// until d has passed.
func (c *cluster) burst(d time.Duration) burst {
	var (
		mu  sync.Mutex
		out = burst{sentAt: map[string]time.Time{}}
		n   atomic.Int64
		wg  sync.WaitGroup
	)
	out.start = time.Now()
	end := out.start.Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := newClient()
			for time.Now().Before(end) {
				t0 := time.Now()
				id, err := c.send(client, int(n.Add(1)))
				lat := time.Since(t0)
				mu.Lock()
				if err != nil {
					out.failed++
					if out.firstErr == nil {
						out.firstErr = err
					}
				} else {
					out.accepted = append(out.accepted, id)
					out.sentAt[id] = t0
					out.latency = append(out.latency, lat)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out.took = time.Since(out.start)
	if len(out.accepted) == 0 {
		c.b.Fatalf("no send accepted: %v", out.firstErr)
	}
	if out.failed > 0 {
		fmt.Printf("%s: %d sends refused or failed, the first: %v\n", c.name, out.failed, out.firstErr)
		fmt.Printf("%s: the end of %s's log:\n%s\n", c.name, c.procs[0].name, tail(c.procs[0].log))
	}
	return out
}

// percentile of d (sorted in place).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(float64(len(d)-1)*p)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// drainOutbox waits until want messages have reached the sandbox provider,
// or until limit has passed, and returns how many did and when the last
// one did: the change time of its .eml, set when the file is linked under
// its final name, which is the moment the provider accepted it.
func (c *cluster) drainOutbox(want int, limit time.Duration) (int, time.Time) {
	deadline := time.Now().Add(limit)
	for {
		names := c.outboxFiles()
		if len(names) >= want || time.Now().After(deadline) {
			var last time.Time
			for _, name := range names {
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(c.outbox, name), &st); err != nil {
					c.b.Fatal(err)
				}
				if t := time.Unix(st.Ctim.Sec, st.Ctim.Nsec); t.After(last) {
					last = t
				}
			}
			return len(names), last
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) outboxFiles() []string {
	f, err := os.Open(c.outbox)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, ".eml") })
}

// receiver is a local webhook endpoint that counts distinct deliveries
// (by service-delivery-id) and when each email's event first arrived.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	seen    map[string]bool
	arrived map[string]time.Time // email id + "/" + type
	last    time.Time
}

func newReceiver(b *testing.B) *receiver {
	r := &receiver{seen: map[string]bool{}, arrived: map[string]time.Time{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		now := time.Now()
		var ev struct {
			Type string
			Data struct {
				EmailID string `json:"email_id"`
			}
		}
		json.Unmarshal(body, &ev)
		id := req.Header.Get("service-delivery-id")
		r.mu.Lock()
		if !r.seen[id] {
			r.seen[id] = true
			r.last = now
			key := ev.Data.EmailID + "/" + ev.Type
			if _, ok := r.arrived[key]; !ok {
				r.arrived[key] = now
			}
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(r.Close)
	return r
}

// wait waits until want distinct deliveries have arrived, or limit has
// passed, and returns how many did and when the last one did.
func (r *receiver) wait(want int, limit time.Duration) (int, time.Time) {
	deadline := time.Now().Add(limit)
	for {
		r.mu.Lock()
		n, last := len(r.seen), r.last
		r.mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			return n, last
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *receiver) arrival(emailID, typ string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.arrived[emailID+"/"+typ]
	return t, ok
}
