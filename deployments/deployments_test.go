package deployments

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/mailroom/mailroom/internal/config"
)

// The test runs in deployments/, so paths are relative to it.
const (
	composeFile = "compose.yaml"
	envExample  = "mailroom.env.example"
	dockerfile  = "Dockerfile"
	makefile    = "../Makefile"
	k8sDir      = "kubernetes"
)

// TestYAMLParses loads every YAML document of every YAML file under
// deployments/.
func TestYAMLParses(t *testing.T) {
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !isYAML(path) {
			return nil
		}
		files++
		docs, err := loadYAML(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no YAML files under deployments/")
	}
	t.Logf("%d YAML files parse", files)
}

func TestCompose(t *testing.T) {
	docs, err := loadYAML(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 {
		t.Fatalf("%s: want one document, got %d", composeFile, len(docs))
	}
	services := mapAt(docs[0], "services")
	if services == nil {
		t.Fatalf("%s: no services", composeFile)
	}
	known := knownVariables(t)

	for name, want := range map[string][]string{"api": {"api"}, "worker": {"projections", "workers"}} {
		svc := mapAt(services, name)
		if svc == nil {
			t.Errorf("compose: no service %q", name)
			continue
		}
		roles := composeRoles(svc)
		if !slices.Equal(roles, want) {
			t.Errorf("compose: service %s runs roles %v, want %v", name, roles, want)
		}
		if n := mapAt(svc, "deploy")["replicas"]; n != 2 {
			t.Errorf("compose: service %s has %v replicas, want 2", name, n)
		}
		if svc["env_file"] == nil {
			t.Errorf("compose: service %s reads no env_file (MAILROOM_MASTER_KEY comes from it)", name)
		}
		env := stringMap(svc["environment"])
		es := env["MAILROOM_EVENTSTORE"]
		if !strings.HasPrefix(es, "esdb://") {
			t.Errorf("compose: service %s: MAILROOM_EVENTSTORE = %q, want an esdb:// connection string", name, es)
		}
		for _, host := range esdbHosts(es) {
			if mapAt(services, host) == nil {
				t.Errorf("compose: service %s: event store host %q is not a service", name, host)
			}
		}
		if n := len(esdbHosts(es)); n != 3 {
			t.Errorf("compose: service %s: MAILROOM_EVENTSTORE names %d nodes, want the 3 of the cluster", name, n)
		}
		for k := range env {
			if strings.HasPrefix(k, "MAILROOM_") && !known[k] {
				t.Errorf("compose: service %s sets %s, which Mailroom does not read", name, k)
			}
		}
	}

	api := mapAt(services, "api")
	hc := fmt.Sprint(mapAt(api, "healthcheck")["test"])
	for _, path := range []string{"/healthz", "/readyz"} {
		if !strings.Contains(hc, path) {
			t.Errorf("compose: api healthcheck %s does not check %s", hc, path)
		}
	}

	migrate := mapAt(services, "migrate")
	if migrate == nil {
		t.Error("compose: no migrate service")
	} else {
		run := append(stringList(migrate["entrypoint"]), stringList(migrate["command"])...)
		if !slices.Contains(run, "migrate") {
			t.Errorf("compose: migrate service runs %v, want mailroom migrate", run)
		}
		if r := fmt.Sprint(migrate["restart"]); r != "no" {
			t.Errorf("compose: migrate service restart = %q, want \"no\" (one-shot)", r)
		}
	}

	nodes := 0
	for name := range services {
		svc := mapAt(services, name)
		image := fmt.Sprint(svc["image"])
		if !strings.Contains(image, "kurrentdb") && !strings.Contains(image, "eventstore/eventstore") {
			continue
		}
		nodes++
		env := stringMap(svc["environment"])
		size := env["KURRENTDB_CLUSTER_SIZE"] + env["EVENTSTORE_CLUSTER_SIZE"]
		if size != "3" {
			t.Errorf("compose: %s: cluster size %q, want 3", name, size)
		}
	}
	if nodes != 3 {
		t.Errorf("compose: %d KurrentDB/EventStoreDB nodes, want 3", nodes)
	}
	if image := fmt.Sprint(mapAt(services, "postgres")["image"]); !strings.HasPrefix(image, "postgres:15") {
		t.Errorf("compose: postgres image %q, want PostgreSQL 15", image)
	}
}

func TestKubernetes(t *testing.T) {
	type object struct {
		file string
		doc  map[string]any
	}
	var objects []object
	entries, err := os.ReadDir(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	var manifests []string // files kustomization.yaml should list
	for _, e := range entries {
		if e.IsDir() || !isYAML(e.Name()) {
			continue
		}
		if e.Name() != "kustomization.yaml" && e.Name() != "secret.example.yaml" {
			manifests = append(manifests, e.Name())
		}
		docs, err := loadYAML(filepath.Join(k8sDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			objects = append(objects, object{e.Name(), d})
		}
	}
	find := func(kind, name string) map[string]any {
		for _, o := range objects {
			if o.doc["kind"] == kind && nameOf(o.doc) == name {
				return o.doc
			}
		}
		return nil
	}
	known := knownVariables(t)

	// kustomization.yaml lists every manifest, and none of them is a Secret.
	kust := find("Kustomization", "")
	if kust == nil {
		t.Fatal("kubernetes: no kustomization.yaml")
	}
	listed := stringList(kust["resources"])
	sort.Strings(listed)
	sort.Strings(manifests)
	if !slices.Equal(listed, manifests) {
		t.Errorf("kustomization resources %v, want every manifest %v", listed, manifests)
	}
	for _, o := range objects {
		if o.doc["kind"] == "Secret" && slices.Contains(listed, o.file) {
			t.Errorf("kubernetes: %s defines a Secret and is applied by kustomization.yaml; reference it instead", o.file)
		}
	}

	cm := find("ConfigMap", "mailroom-config")
	if cm == nil {
		t.Fatal("kubernetes: no ConfigMap mailroom-config")
	}
	validateSettings(t, "ConfigMap mailroom-config", stringMap(cm["data"]))
	for k := range stringMap(cm["data"]) {
		if !known[k] {
			t.Errorf("ConfigMap: %s is not a Mailroom setting", k)
		}
		if k == "MAILROOM_MASTER_KEY" || k == "MAILROOM_DATABASE_URL" {
			t.Errorf("ConfigMap: %s belongs in the Secret", k)
		}
	}

	deployments := map[string][]string{"mailroom-api": {"api"}, "mailroom-worker": {"projections", "workers"}}
	for _, o := range objects {
		if o.doc["kind"] == "Deployment" {
			if _, ok := deployments[nameOf(o.doc)]; !ok {
				t.Errorf("kubernetes: unexpected Deployment %q in %s", nameOf(o.doc), o.file)
			}
		}
	}
	for name, want := range deployments {
		d := find("Deployment", name)
		if d == nil {
			t.Errorf("kubernetes: no Deployment %s", name)
			continue
		}
		spec := mapAt(d, "spec")
		if spec["replicas"] != 2 {
			t.Errorf("%s: replicas %v, want 2", name, spec["replicas"])
		}
		c := container(d)
		if c == nil {
			t.Errorf("%s: no container", name)
			continue
		}
		if roles := rolesFromArgs(stringList(c["args"])); !slices.Equal(roles, want) {
			t.Errorf("%s: roles %v, want %v", name, roles, want)
		}
		if secretKey(c, "MAILROOM_MASTER_KEY") == "" || secretKey(c, "MAILROOM_DATABASE_URL") == "" {
			t.Errorf("%s: MAILROOM_MASTER_KEY and MAILROOM_DATABASE_URL must come from a Secret", name)
		}
		loadsConfig := false
		for _, e := range listOfMaps(c["envFrom"]) {
			loadsConfig = loadsConfig || mapAt(e, "configMapRef")["name"] == "mailroom-config"
		}
		if !loadsConfig {
			t.Errorf("%s: does not load the ConfigMap mailroom-config", name)
		}
		for _, e := range listOfMaps(c["env"]) {
			if n := fmt.Sprint(e["name"]); strings.HasPrefix(n, "MAILROOM_") && !known[n] {
				t.Errorf("%s: sets %s, which Mailroom does not read", name, n)
			}
		}
		if mapAt(c, "resources")["requests"] == nil || mapAt(c, "resources")["limits"] == nil {
			t.Errorf("%s: container has no resource requests and limits", name)
		}
		if !slices.Contains(want, "api") {
			continue // only the api role listens on HTTP
		}
		if p := probePath(c, "readinessProbe"); p != "/readyz" {
			t.Errorf("%s: readiness probe on %q, want /readyz", name, p)
		}
		if p := probePath(c, "livenessProbe"); p != "/healthz" {
			t.Errorf("%s: liveness probe on %q, want /healthz", name, p)
		}
	}

	// The Service selects the API pods on a port the container declares.
	svc := find("Service", "mailroom-api")
	if svc == nil {
		t.Error("kubernetes: no Service mailroom-api")
	} else if api := find("Deployment", "mailroom-api"); api != nil {
		podLabels := stringMap(mapAt(mapAt(mapAt(api, "spec"), "template"), "metadata")["labels"])
		for k, v := range stringMap(mapAt(svc, "spec")["selector"]) {
			if podLabels[k] != v {
				t.Errorf("Service mailroom-api selects %s=%s, which the API pods do not carry", k, v)
			}
		}
		var ports []string
		for _, p := range listOfMaps(container(api)["ports"]) {
			ports = append(ports, fmt.Sprint(p["name"]), fmt.Sprint(p["containerPort"]))
		}
		for _, p := range listOfMaps(mapAt(svc, "spec")["ports"]) {
			if !slices.Contains(ports, fmt.Sprint(p["targetPort"])) {
				t.Errorf("Service mailroom-api targets port %v, which the API container does not declare", p["targetPort"])
			}
		}
	}

	job := find("Job", "mailroom-migrate")
	if job == nil {
		t.Error("kubernetes: no Job mailroom-migrate")
	} else {
		c := container(job)
		if run := append(stringList(c["command"]), stringList(c["args"])...); !slices.Equal(run, []string{"mailroom", "migrate"}) {
			t.Errorf("Job mailroom-migrate runs %v, want [mailroom migrate]", run)
		}
		if secretKey(c, "MAILROOM_DATABASE_URL") == "" {
			t.Error("Job mailroom-migrate: MAILROOM_DATABASE_URL must come from a Secret")
		}
	}
}

// TestEnvExample checks that the example environment file documents every
// MAILROOM_* variable that `mailroom serve --help` lists, and no other.
func TestEnvExample(t *testing.T) {
	known := knownVariables(t)
	f, err := os.Open(envExample)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mentioned := map[string]bool{}
	active := map[string]string{}
	setting := regexp.MustCompile(`^#?\s*(MAILROOM_[A-Z0-9_]+)=(.*)$`)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		m := setting.FindStringSubmatch(line)
		if m == nil {
			if line != "" && !strings.HasPrefix(line, "#") {
				t.Errorf("%s:%d: not a KEY=VALUE line or a comment: %q", envExample, n, line)
			}
			continue
		}
		name := m[1]
		if !known[name] {
			t.Errorf("%s:%d: %s is not a Mailroom setting", envExample, n, name)
		}
		mentioned[name] = true
		if strings.HasPrefix(line, "#") {
			continue
		}
		if _, dup := active[name]; dup {
			t.Errorf("%s:%d: %s is set twice", envExample, n, name)
		}
		active[name] = m[2]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range known {
		if !mentioned[name] {
			t.Errorf("%s does not document %s (listed by `mailroom serve --help`); add it, commented out if the default fits", envExample, name)
		}
	}
	validateSettings(t, envExample, active)
	if active["MAILROOM_ENV"] != "production" {
		t.Errorf("%s: MAILROOM_ENV=%q, want production", envExample, active["MAILROOM_ENV"])
	}
	if _, ok := active["MAILROOM_MASTER_KEY"]; !ok {
		t.Errorf("%s: MAILROOM_MASTER_KEY must be present for the operator to fill in", envExample)
	}
}

// TestDockerfileMatchesMakefile checks that the image builds what `make
// build` builds: the same go build arguments, with cgo off, and that the
// runtime stage is what the compose file and the manifests expect.
func TestDockerfileMatchesMakefile(t *testing.T) {
	mk, err := makeBuild(makefile)
	if err != nil {
		t.Fatal(err)
	}
	df, env, err := dockerBuild(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(df, mk) {
		t.Errorf("Dockerfile builds\n\tgo %s\nMakefile builds\n\tgo %s", strings.Join(df, " "), strings.Join(mk, " "))
	}
	if env["CGO_ENABLED"] != "0" {
		t.Errorf("Dockerfile: go build runs with CGO_ENABLED=%q, want 0", env["CGO_ENABLED"])
	}

	text, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	ins := instructions(string(text))
	froms, last := 0, map[string][]string{}
	for _, in := range ins {
		if in[0] == "FROM" {
			froms++
			last = map[string][]string{} // instructions of the final stage
		}
		last[in[0]] = append(last[in[0]], in[1])
	}
	if froms < 2 {
		t.Errorf("Dockerfile: %d stages, want a multi-stage build", froms)
	}
	image := strings.Fields(lastOf(last["FROM"]))
	if len(image) == 0 || !(strings.HasPrefix(image[0], "alpine") || strings.Contains(image[0], "distroless/static")) {
		t.Errorf("Dockerfile: runtime stage FROM %v, want alpine or distroless static", image)
	}
	if u := strings.TrimSpace(lastOf(last["USER"])); u == "" || u == "root" || strings.HasPrefix(u, "0") {
		t.Errorf("Dockerfile: runtime USER %q, want a non-root user", u)
	}
	if e := strings.Join(last["EXPOSE"], " "); !slices.Contains(strings.Fields(e), "8080") {
		t.Errorf("Dockerfile: EXPOSE %q, want 8080", e)
	}
	if ep := strings.Join(strings.Fields(lastOf(last["ENTRYPOINT"])), ""); ep != `["mailroom","serve"]` {
		t.Errorf("Dockerfile: ENTRYPOINT %s, want [\"mailroom\", \"serve\"]", lastOf(last["ENTRYPOINT"]))
	}
	if !slices.Contains(strings.Fields(strings.Join(last["ENV"], " ")), "MAILROOM_HTTP_ADDR=0.0.0.0:8080") {
		t.Errorf("Dockerfile: runtime stage does not set MAILROOM_HTTP_ADDR=0.0.0.0:8080")
	}
}

// TestComposeConfig runs `docker compose config` where the compose plugin
// exists.
func TestComposeConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		t.Logf("docker compose config not run: `docker compose version` failed (%v): %s", err, bytes.TrimSpace(out))
		return
	}
	cmd := exec.CommandContext(ctx, "docker", "compose", "-f", composeFile, "config", "--quiet")
	cmd.Env = append(os.Environ(), "MAILROOM_ENV_FILE="+envExample, "POSTGRES_PASSWORD=example")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
	t.Log("docker compose config accepts", composeFile)
}

// TestKustomizeBuild renders the Kubernetes manifests with `kubectl
// kustomize` where kubectl exists (it needs no cluster).
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl kustomize not run: kubectl not found")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectl, "kustomize", k8sDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, out)
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	kinds := map[string]int{}
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubectl kustomize output: %v", err)
		}
		kinds[fmt.Sprint(obj["kind"])]++
		if ns := mapAt(obj, "metadata")["namespace"]; obj["kind"] != "Namespace" && ns != "mailroom" {
			t.Errorf("%s %s is in namespace %v, want mailroom", obj["kind"], nameOf(obj), ns)
		}
	}
	if kinds["Deployment"] != 2 || kinds["Service"] != 1 || kinds["Job"] != 1 || kinds["ConfigMap"] != 1 || kinds["Secret"] != 0 {
		t.Errorf("kubectl kustomize renders %v", kinds)
	}
}

// --- YAML helpers -------------------------------------------------------------

func isYAML(path string) bool {
	ext := filepath.Ext(path)
	return ext == ".yaml" || ext == ".yml"
}

// loadYAML decodes every document of a file. Empty documents are skipped.
func loadYAML(path string) ([]map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []map[string]any
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// mapAt returns m[key] as a map, or nil.
func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

// nameOf returns a Kubernetes object's metadata.name, or "".
func nameOf(obj map[string]any) string {
	n, _ := mapAt(obj, "metadata")["name"].(string)
	return n
}

func listOfMaps(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func firstOf(v any) map[string]any {
	if l := listOfMaps(v); len(l) > 0 {
		return l[0]
	}
	return nil
}

// stringList reads a YAML list of scalars, or a string split on spaces.
func stringList(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = fmt.Sprint(e)
		}
		return out
	}
	return nil
}

// stringMap reads a YAML mapping, or a compose list of KEY=VALUE strings.
func stringMap(v any) map[string]string {
	out := map[string]string{}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out[k] = fmt.Sprint(e)
		}
	case []any:
		for _, e := range v {
			k, val, _ := strings.Cut(fmt.Sprint(e), "=")
			out[k] = val
		}
	}
	return out
}

// rolesFromArgs finds --roles X or --roles=X.
func rolesFromArgs(args []string) []string {
	for i, a := range args {
		var v string
		switch {
		case a == "--roles" && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "--roles="):
			v = strings.TrimPrefix(a, "--roles=")
		default:
			continue
		}
		return strings.Split(v, ",")
	}
	return nil
}

// composeRoles reads a service's roles from its command, else MAILROOM_ROLES.
func composeRoles(svc map[string]any) []string {
	if r := rolesFromArgs(stringList(svc["command"])); r != nil {
		return r
	}
	if r := stringMap(svc["environment"])["MAILROOM_ROLES"]; r != "" {
		return strings.Split(r, ",")
	}
	return nil
}

// esdbHosts returns the host names of an esdb:// connection string.
func esdbHosts(conn string) []string {
	rest, ok := strings.CutPrefix(conn, "esdb://")
	if !ok {
		return nil
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	var hosts []string
	for _, h := range strings.Split(rest, ",") {
		host, _, _ := strings.Cut(h, ":")
		hosts = append(hosts, host)
	}
	return hosts
}

func container(workload map[string]any) map[string]any {
	pod := mapAt(mapAt(mapAt(workload, "spec"), "template"), "spec")
	return firstOf(pod["containers"])
}

// secretKey returns the Secret that provides variable name to container c,
// or "".
func secretKey(c map[string]any, name string) string {
	for _, e := range listOfMaps(c["env"]) {
		if e["name"] == name {
			if ref := mapAt(mapAt(e, "valueFrom"), "secretKeyRef"); ref != nil {
				return fmt.Sprint(ref["name"])
			}
		}
	}
	for _, e := range listOfMaps(c["envFrom"]) {
		if ref := mapAt(e, "secretRef"); ref != nil {
			return fmt.Sprint(ref["name"])
		}
	}
	return ""
}

func probePath(c map[string]any, probe string) string {
	p, _ := mapAt(mapAt(c, probe), "httpGet")["path"].(string)
	return p
}

// knownVariables returns the MAILROOM_* variables Mailroom reads, from the
// flag definitions behind `mailroom serve --help`.
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	var cfg config.Config
	fs := pflag.NewFlagSet("mailroom", pflag.ContinueOnError)
	cfg.Flags(fs)
	re := regexp.MustCompile(`\[(MAILROOM_[A-Z0-9_]+)\]`)
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if m := re.FindStringSubmatch(f.Usage); m != nil {
			known[m[1]] = true
		}
	})
	if len(known) < 10 {
		t.Fatalf("found only %d MAILROOM_* variables in the flag usage; has the [MAILROOM_X] convention changed?", len(known))
	}
	return known
}

// validateSettings applies settings as environment variables and runs the
// configuration's own checks, so a value Mailroom would reject at start
// (a malformed duration, an unknown role, ...) fails here.
func validateSettings(t *testing.T, source string, settings map[string]string) {
	t.Helper()
	for k, v := range settings {
		if strings.HasPrefix(k, "MAILROOM_") {
			t.Setenv(k, v)
		}
	}
	// The master key comes from the Secret, or is filled in by whoever
	// copies the env file: these checks are of the other settings.
	placeholder := os.Getenv("MAILROOM_MASTER_KEY") == ""
	if placeholder {
		t.Setenv("MAILROOM_MASTER_KEY", strings.Repeat("ab", 32))
	}
	var cfg config.Config
	fs := pflag.NewFlagSet("mailroom", pflag.ContinueOnError)
	cfg.Flags(fs)
	cfg.ApplyEnv(fs)
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: Mailroom would refuse these settings: %v", source, err)
	}
	for k := range settings {
		if strings.HasPrefix(k, "MAILROOM_") {
			os.Unsetenv(k) // t.Setenv restores at the end; keep later checks independent
		}
	}
	if placeholder {
		os.Unsetenv("MAILROOM_MASTER_KEY")
	}
}

// --- Makefile and Dockerfile helpers -------------------------------------------

// makeBuild returns the arguments after `go` of the Makefile's build recipe,
// with make variables expanded and $(VERSION) left as ${VERSION}.
func makeBuild(path string) ([]string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	assign := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$`)
	var recipe []string
	inBuild := false
	for _, line := range strings.Split(string(text), "\n") {
		if inBuild {
			if strings.HasPrefix(line, "\t") {
				recipe = append(recipe, strings.TrimSpace(line))
				continue
			}
			inBuild = false
		}
		if m := assign.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "\t") {
			vars[m[1]] = strings.TrimSpace(m[2])
			continue
		}
		if strings.HasPrefix(line, "build:") {
			inBuild = true
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var expand func(s string, depth int) string
	expand = func(s string, depth int) string {
		return ref.ReplaceAllStringFunc(s, func(r string) string {
			name := ref.FindStringSubmatch(r)[1]
			if name == "VERSION" {
				return "${VERSION}" // a build input, from git describe or --build-arg
			}
			v, ok := vars[name]
			if !ok || depth > 10 {
				return r
			}
			return expand(v, depth+1)
		})
	}
	for _, line := range recipe {
		words, err := shellWords(expand(line, 0))
		if err != nil {
			return nil, fmt.Errorf("Makefile build recipe: %w", err)
		}
		if len(words) > 1 && words[0] == "go" && words[1] == "build" {
			return normalizeFlags(words[1:]), nil
		}
	}
	return nil, errors.New("Makefile: no `go build` in the build target's recipe")
}

// dockerBuild returns the arguments after `go` of the Dockerfile's go build
// command, and the environment it runs with (ENV of its stage plus inline
// assignments).
func dockerBuild(path string) ([]string, map[string]string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	env := map[string]string{}
	for _, in := range instructions(string(text)) {
		switch in[0] {
		case "FROM":
			env = map[string]string{}
		case "ENV":
			words, err := shellWords(in[1])
			if err != nil {
				return nil, nil, err
			}
			for _, w := range words {
				if k, v, ok := strings.Cut(w, "="); ok {
					env[k] = v
				}
			}
		case "RUN":
			for _, part := range strings.Split(in[1], "&&") {
				words, err := shellWords(part)
				if err != nil {
					return nil, nil, fmt.Errorf("Dockerfile RUN: %w", err)
				}
				for len(words) > 0 && strings.HasPrefix(words[0], "--mount=") {
					words = words[1:]
				}
				for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
					k, v, _ := strings.Cut(words[0], "=")
					env[k] = v
					words = words[1:]
				}
				if len(words) > 1 && words[0] == "go" && words[1] == "build" {
					return normalizeFlags(words[1:]), env, nil
				}
			}
		}
	}
	return nil, nil, errors.New("Dockerfile: no RUN go build")
}

// instructions splits a Dockerfile into [INSTRUCTION, arguments] pairs,
// joining continuation lines and dropping comments.
func instructions(text string) [][2]string {
	var out [][2]string
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		word, rest, _ := strings.Cut(s, " ")
		out = append(out, [2]string{strings.ToUpper(word), strings.TrimSpace(rest)})
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

// normalizeFlags writes -flag=value as -flag value and $VERSION as
// ${VERSION}, so that equivalent command lines compare equal.
func normalizeFlags(args []string) []string {
	var out []string
	for _, a := range args {
		a = regexp.MustCompile(`\$VERSION\b`).ReplaceAllString(a, "${VERSION}")
		if strings.HasPrefix(a, "-") {
			if k, v, ok := strings.Cut(a, "="); ok {
				out = append(out, k, v)
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// shellWords splits s like a POSIX shell would for these simple command
// lines: blanks separate words, single and double quotes group them, and a
// backslash escapes the next character outside single quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	runes := []rune(s)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(runes):
				i++
				cur.WriteRune(runes[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(runes):
			i++
			cur.WriteRune(runes[i])
			inWord = true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// `make clean` keeps ./.mailroom, whose development master key the
// mailroom database opens only with: without it `make run` refuses that
// database. `make reset` removes the key and drops the database together.
func TestMakeCleanKeepsTheDevelopmentKey(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	recipe := func(target string) string {
		out, err := exec.Command("make", "-n", "-C", "..", target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	if clean := recipe("clean"); strings.Contains(clean, ".mailroom") {
		t.Errorf("make clean removes the development key:\n%s", clean)
	}
	reset := recipe("reset")
	if !strings.Contains(reset, "rm -rf .mailroom") || !strings.Contains(reset, "DROP DATABASE IF EXISTS mailroom") {
		t.Errorf("make reset does not remove the key and the database together:\n%s", reset)
	}
}
