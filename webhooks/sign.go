package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// The signature scheme. Each delivery carries
//
//	Gateway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>[,v1=…]
//	Gateway-Event-Id: evt_…
//
// with one v1 per secret valid at the time (two during a rotation's grace
// period). A receiver recomputes the HMAC with its secret, accepts when any
// v1 matches, and refuses a t too far from its own clock (package receiver).
const (
	SignatureHeader = "Gateway-Signature"
	EventIDHeader   = "Gateway-Event-Id"
)

// Signature computes the v1 value of body signed at t with secret.
func Signature(secret string, t int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(t, 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// SignatureValue is the Gateway-Signature header of body signed at t with
// every one of secrets.
func SignatureValue(secrets []string, t time.Time, body []byte) string {
	unix := t.Unix()
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(unix, 10))
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(Signature(s, unix, body))
	}
	return b.String()
}
