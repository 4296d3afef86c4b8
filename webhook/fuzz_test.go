package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/webhook"
)

// FuzzVerify checks Verify on any signature header a receiver may be sent:
// it verifies only a v1 that is the HMAC of "<t>.<body>" for a t within
// tolerance, and always what Sign produced for that body just now.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_c2VjcmV0"
	now := time.Unix(1735787045, 0)
	body := []byte(`{"type":"email.delivered","data":{"email_id":"e1"}}`)
	good := webhook.Sign(secret, body, now)
	for _, h := range []string{
		good, good + ",v1=00", "v1=00," + good, " t = 1735787045 , v1 = " + good[len("t=1735787045,v1="):],
		"t=1735787045", "v1=abc", "t=,v1=", "t=1,t=2,v1=00", "t=01735787045,v1=00", "t=+1735787045,v1=00",
		"t=-1,v1=00", "t=99999999999999999999,v1=00", "t=253402300800,v1=00", "garbage", "", ",,,", "v0=1,t=1735787045,v1=" + strings.ToUpper(good[len("t=1735787045,v1="):]),
	} {
		f.Add(h, body)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := webhook.VerifyAt(secret, header, body, 0, now)
		if err == nil {
			// Find the t and a v1 that justify it.
			var ts string
			var sigs []string
			for item := range strings.SplitSeq(header, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
				switch strings.TrimSpace(k) {
				case "t":
					ts = strings.TrimSpace(v)
				case "v1":
					sigs = append(sigs, strings.TrimSpace(v))
				}
			}
			sec, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil || ts[0] == '+' || ts[0] == '-' {
				t.Fatalf("verified %q with t %q", header, ts)
			}
			if d := now.Sub(time.Unix(sec, 0)); d > webhook.DefaultTolerance || d < -webhook.DefaultTolerance {
				t.Fatalf("verified %q, %v from now", header, d)
			}
			m := hmac.New(sha256.New, []byte(secret))
			m.Write([]byte(ts + "."))
			m.Write(body)
			want := m.Sum(nil)
			matched := false
			for _, s := range sigs {
				got, herr := hex.DecodeString(s)
				matched = matched || (herr == nil && hmac.Equal(got, want))
			}
			if !matched {
				t.Fatalf("verified %q for body %q without its signature", header, body)
			}
		} else if !errors.Is(err, webhook.ErrMissingHeader) && !errors.Is(err, webhook.ErrMalformedHeader) &&
			!errors.Is(err, webhook.ErrTimestampOutOfTolerance) && !errors.Is(err, webhook.ErrNoValidSignature) {
			t.Fatalf("VerifyAt(%q): unexpected error %v", header, err)
		}
		if err := webhook.VerifyAt(secret, webhook.Sign(secret, body, now), body, 0, now); err != nil {
			t.Fatalf("Sign's own header for %q does not verify: %v", body, err)
		}
	})
}
