package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gateway "gateway/clients/go"
	"gateway/clients/go/webhook"
)

// sign is the Gateway-Signature of body at t with each of secrets, as the
// gateway writes it (docs/webhooks.md).
func sign(t time.Time, body []byte, secrets ...string) string {
	h := "t=" + strconv.FormatInt(t.Unix(), 10)
	for _, s := range secrets {
		m := hmac.New(sha256.New, []byte(s))
		fmt.Fprintf(m, "%d.%s", t.Unix(), body)
		h += ",v1=" + hex.EncodeToString(m.Sum(nil))
	}
	return h
}

func TestVerify(t *testing.T) {
	const oldSecret, newSecret = "whsec_old", "whsec_new"
	body := []byte(`{"id":"evt_1","type":"payment.succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name    string
		header  string
		body    []byte
		secrets []string
		want    error
	}{
		{"valid", sign(now, body, newSecret), body, []string{newSecret}, nil},
		{"signed a little in the past", sign(now.Add(-4*time.Minute), body, newSecret), body, []string{newSecret}, nil},
		{"tampered body", sign(now, body, newSecret), []byte(`{"id":"evt_1","type":"payment.failed"}`), []string{newSecret}, webhook.ErrNoMatch},
		{"wrong secret", sign(now, body, newSecret), body, []string{"whsec_other"}, webhook.ErrNoMatch},
		{"expired timestamp", sign(now.Add(-6*time.Minute), body, newSecret), body, []string{newSecret}, webhook.ErrTooOld},
		{"timestamp from the future", sign(now.Add(6*time.Minute), body, newSecret), body, []string{newSecret}, webhook.ErrTooOld},
		{"rotation grace, the receiver knows the old secret", sign(now, body, newSecret, oldSecret), body, []string{oldSecret}, nil},
		{"rotation grace, the receiver knows the new secret", sign(now, body, newSecret, oldSecret), body, []string{newSecret}, nil},
		{"receiver rotating: it tries both", sign(now, body, newSecret), body, []string{oldSecret, newSecret}, nil},
		{"after the grace the old secret no longer matches", sign(now, body, newSecret), body, []string{oldSecret}, webhook.ErrNoMatch},
		{"another scheme beside v1 is ignored", "v0=abc," + sign(now, body, newSecret), body, []string{newSecret}, nil},
		{"an unreadable v1 beside a good one", strings.Replace(sign(now, body, newSecret), "v1=", "v1=zz,v1=", 1), body, []string{newSecret}, nil},
		{"a moved timestamp", strings.Replace(sign(now, body, newSecret), "t=1800000000", "t=1800000001", 1), body, []string{newSecret}, webhook.ErrNoMatch},
		{"no timestamp", "v1=00", body, []string{newSecret}, webhook.ErrMalformed},
		{"two timestamps", "t=1,t=2,v1=00", body, []string{newSecret}, webhook.ErrMalformed},
		{"a timestamp that is no number", "t=soon,v1=00", body, []string{newSecret}, webhook.ErrMalformed},
		{"no signature", "t=1800000000", body, []string{newSecret}, webhook.ErrNoMatch},
		{"garbage", "hello", body, []string{newSecret}, webhook.ErrMalformed},
		{"empty", "", body, []string{newSecret}, webhook.ErrMalformed},
		{"no secret", sign(now, body, newSecret), body, nil, webhook.ErrNoSecret},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := webhook.VerifyAt(c.body, c.header, c.secrets, 5*time.Minute, now); !errors.Is(err, c.want) {
				t.Fatalf("VerifyAt(%q) = %v, want %v", c.header, err, c.want)
			}
		})
	}
	if err := webhook.Verify(body, sign(time.Now(), body, newSecret), []string{newSecret}, 0); err != nil {
		t.Fatalf("Verify now, default tolerance: %v", err)
	}
}

const eventJSON = `{"id":"evt_01M8SVRZDNX7KSX4YEP34TX2JZ","type":"payment.succeeded","object_type":"payment",
"object_id":"pay_01M8SVRZDH8JWSTQVXXY9DNHZC","seq":2,"created_at":"2026-12-01T22:32:00.693859Z",
"data":{"id":"pay_01M8SVRZDH8JWSTQVXXY9DNHZC","status":"succeeded","amount":1000,"currency":"KRW","metadata":{"order":"A-1"}}}`

func TestParseEvent(t *testing.T) {
	ev, err := webhook.ParseEvent([]byte(eventJSON))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "evt_01M8SVRZDNX7KSX4YEP34TX2JZ" || ev.Type != gateway.EventPaymentSucceeded || ev.Seq != 2 || ev.CreatedAt.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	p, err := ev.Payment()
	if err != nil || p.Amount != 1000 || p.Metadata["order"] != "A-1" {
		t.Fatalf("Payment() = %+v, %v", p, err)
	}
	if _, err := ev.Refund(); err == nil {
		t.Fatal("a payment's event decoded as a refund")
	}
	for _, bad := range []string{``, `[]`, `{"id":"evt_1"}`, eventJSON + `{}`, `{"id":"evt_1","type":"x","object_id":"pay_1","data":{}`} {
		if _, err := webhook.ParseEvent([]byte(bad)); !errors.Is(err, webhook.ErrNotEvent) {
			t.Errorf("ParseEvent(%q) = %v, want ErrNotEvent", bad, err)
		}
	}
}

// memInbox is an Inbox in memory: what a committed transaction recorded,
// and the order of what was done.
type memInbox struct {
	mu                                sync.Mutex
	committed                         map[string]bool
	log                               []string
	failBegin, failRecord, failCommit error
}

type memTx struct {
	id string
}

func (m *memInbox) Begin(context.Context) (*memTx, error) {
	m.note("begin")
	return &memTx{}, m.failBegin
}

func (m *memInbox) Record(_ context.Context, tx *memTx, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, "record "+id)
	if m.failRecord != nil {
		return false, m.failRecord
	}
	tx.id = id
	return !m.committed[id], nil
}

func (m *memInbox) Commit(tx *memTx) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, "commit")
	if m.failCommit != nil {
		return m.failCommit
	}
	if m.committed == nil {
		m.committed = map[string]bool{}
	}
	m.committed[tx.id] = true
	return nil
}

func (m *memInbox) Rollback(*memTx) error {
	m.note("rollback")
	return nil
}

func (m *memInbox) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, s)
}

func (m *memInbox) steps() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := strings.Join(m.log, ", ")
	m.log = nil
	return s
}

func TestHandler(t *testing.T) {
	const secret = "whsec_test"
	now := time.Unix(1_800_000_000, 0)
	inbox := &memInbox{}
	var applied []string
	fail := errors.New("the shop's database is down")
	var failNext error
	h := webhook.NewHandler([]string{secret}, inbox, func(_ context.Context, tx *memTx, ev gateway.Event) error {
		if failNext != nil {
			err := failNext
			failNext = nil
			return err
		}
		applied = append(applied, ev.ID)
		return nil
	}, webhook.WithClock(func() time.Time { return now }))
	deliver := func(method, body, signature, eventID string) int {
		r := httptest.NewRequest(method, "/hooks", strings.NewReader(body))
		r.Header.Set(webhook.SignatureHeader, signature)
		if eventID != "" {
			r.Header.Set(webhook.EventIDHeader, eventID)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const id = "evt_01M8SVRZDNX7KSX4YEP34TX2JZ"
	good := sign(now, []byte(eventJSON), secret)
	for _, c := range []struct {
		name      string
		setup     func()
		method    string
		body, sig string
		eventID   string
		status    int
		steps     string
		applied   int
	}{
		{"a delivery is applied and committed", nil, "POST", eventJSON, good, id, 200, "begin, record " + id + ", commit", 1},
		{"its redelivery is acknowledged without running", nil, "POST", eventJSON, good, id, 200, "begin, record " + id + ", rollback", 1},
		{"a bad signature", nil, "POST", eventJSON, sign(now, []byte(eventJSON), "whsec_other"), id, 400, "", 1},
		{"a stale signature", nil, "POST", eventJSON, sign(now.Add(-time.Hour), []byte(eventJSON), secret), id, 400, "", 1},
		{"not a POST", nil, "GET", "", "", "", 405, "", 1},
		{"too large", nil, "POST", strings.Repeat(" ", 1<<20+1), good, id, 413, "", 1},
		{"not an event", nil, "POST", `{"hello":1}`, sign(now, []byte(`{"hello":1}`), secret), "", 400, "", 1},
		{"an event id header that is not the event's", nil, "POST", eventJSON, good, "evt_other", 400, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := deliver(c.method, c.body, c.sig, c.eventID); got != c.status {
				t.Fatalf("status %d, want %d", got, c.status)
			}
			if got := inbox.steps(); got != c.steps {
				t.Fatalf("steps %q, want %q", got, c.steps)
			}
			if len(applied) != c.applied {
				t.Fatalf("applied %v", applied)
			}
		})
	}

	// A type the handler does not take is acknowledged untouched.
	only := webhook.NewHandler([]string{secret}, inbox, func(context.Context, *memTx, gateway.Event) error {
		t.Fatal("the func ran for a type it does not take")
		return nil
	}, webhook.WithClock(func() time.Time { return now }), webhook.WithTypes(gateway.EventRefundSucceeded))
	r := httptest.NewRequest("POST", "/hooks", strings.NewReader(eventJSON))
	r.Header.Set(webhook.SignatureHeader, good)
	rec := httptest.NewRecorder()
	only.ServeHTTP(rec, r)
	if rec.Code != 200 || inbox.steps() != "" {
		t.Fatalf("another type: %d", rec.Code)
	}

	// A failure answers 500 and keeps nothing; the next delivery runs.
	other := strings.Replace(eventJSON, id, "evt_01M8SVRZDNX7KSX4YEP34TX2K0", 1)
	otherSig := sign(now, []byte(other), secret)
	failNext = fail
	if got := deliver("POST", other, otherSig, ""); got != 500 {
		t.Fatalf("a failing func answered %d", got)
	}
	if got := inbox.steps(); got != "begin, record evt_01M8SVRZDNX7KSX4YEP34TX2K0, rollback" {
		t.Fatalf("steps %q", got)
	}
	if got := deliver("POST", other, otherSig, ""); got != 200 || len(applied) != 2 {
		t.Fatalf("the redelivery answered %d, applied %v", got, applied)
	}
	inbox.steps()
	for _, c := range []struct {
		name  string
		set   func(error)
		steps string
	}{
		{"begin fails", func(e error) { inbox.failBegin = e }, "begin"},
		{"record fails", func(e error) { inbox.failRecord = e }, "begin, record evt_3, rollback"},
		{"commit fails", func(e error) { inbox.failCommit = e }, "begin, record evt_3, commit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(eventJSON, id, "evt_3", 1)
			c.set(fail)
			defer c.set(nil)
			if got := deliver("POST", body, sign(now, []byte(body), secret), ""); got != 500 {
				t.Fatalf("status %d", got)
			}
			if got := inbox.steps(); got != c.steps {
				t.Fatalf("steps %q, want %q", got, c.steps)
			}
		})
	}
}

// Some drivers' error with a Number method.
type numbered uint16

func (n numbered) Error() string  { return "numbered" }
func (n numbered) Number() uint16 { return uint16(n) }

// go-sql-driver/mysql's error has the number as a field.
type mysqlError struct {
	Number   uint16
	SQLState [5]byte
	Message  string
}

func (e *mysqlError) Error() string { return fmt.Sprintf("Error %d: %s", e.Number, e.Message) }

func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{numbered(1062), true},
		{numbered(1213), false},
		{&mysqlError{Number: 1062, Message: "Duplicate entry 'evt_1' for key 'PRIMARY'"}, true},
		{fmt.Errorf("exec: %w", &mysqlError{Number: 1062}), true},
		{errors.Join(errors.New("x"), &mysqlError{Number: 1062}), true},
		{&mysqlError{Number: 1205, Message: "Lock wait timeout exceeded"}, false},
		{errors.New("Error 1062 (23000): Duplicate entry 'evt_1' for key 'PRIMARY'"), true},
		{errors.New("Error 1213 (40001): Deadlock found"), false},
	} {
		if got := webhook.DuplicateKey(c.err); got != c.want {
			t.Errorf("DuplicateKey(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
