package httpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func grepLines(body, substr string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMetrics(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/v1/emails/:id", func(c echo.Context) error { return c.String(200, c.Param("id")) })
		e.POST("/v1/emails/send", func(c echo.Context) error { return Validation() })
	})
	// Other packages register on the same registry.
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "mailroom_test_extra_total", Help: "x"})
	s.metrics.Registry().MustRegister(extra)
	extra.Inc()

	s.get(t, "/v1/emails/em_aaa")
	s.get(t, "/v1/emails/em_bbb")
	s.post(t, "/v1/emails/send", "{}")
	s.get(t, "/nowhere/em_ccc")

	res := s.get(t, "/metrics")
	if res.status != 200 {
		t.Fatalf("/metrics: %d", res.status)
	}
	body := string(res.body)
	for _, want := range []string{
		`mailroom_http_requests_total{method="GET",route="/v1/emails/:id",status="200"} 2`,
		`mailroom_http_requests_total{method="POST",route="/v1/emails/send",status="422"} 1`,
		`mailroom_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`mailroom_http_request_duration_seconds_count{method="GET",route="/v1/emails/:id"} 2`,
		`mailroom_test_extra_total 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s\n%s", want, grepLines(body, "mailroom_"))
		}
	}
	for _, raw := range []string{"em_aaa", "em_bbb", "em_ccc", "/nowhere"} {
		if strings.Contains(body, raw) {
			t.Errorf("raw URL %q leaked into labels", raw)
		}
	}
}

func TestMethodLabelBounded(t *testing.T) {
	if methodLabel("GET") != "GET" || methodLabel("BREW") != "OTHER" {
		t.Error("methodLabel")
	}
}

// A client that hangs up while its request waits is counted as 499, as
// nginx counts it, and is no server error: 5xx alerts do not fire when
// clients time out.
func TestAClientThatHangsUpIsNotAServerError(t *testing.T) {
	waiting := make(chan struct{})
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/wait", func(c echo.Context) error {
			close(waiting)
			<-c.Request().Context().Done()
			return c.Request().Context().Err()
		})
	})
	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/wait", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-waiting
		hangUp()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request was answered")
	}
	want := `mailroom_http_requests_total{method="GET",route="/wait",status="499"} 1`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		body := string(s.get(t, "/metrics").body)
		if strings.Contains(body, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s\n%s", want, grepLines(body, "mailroom_http_requests_total"))
		}
	}
	if logs := s.logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("a hang-up was logged as an error:\n%s", logs)
	}
}
