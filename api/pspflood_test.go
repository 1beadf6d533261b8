package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/api"
	"gateway/mysql"
	"gateway/notices"
	"gateway/payments"
	"gateway/psp/toss"
	"gateway/psp/toss/tosstest"
)

// Toss's notifications are unsigned, so anyone can post them; a flood of
// forged ones from one address costs Toss almost no calls (only orders the
// gateway holds, named in Toss's alphabet, are asked about), is answered
// 429 past the address's burst, and writes a bounded number of log lines,
// while Toss's own notification still settles its payment.
func TestTossNotificationFloodCostsTossLittle(t *testing.T) {
	fake := tosstest.New(tossKey)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_, proxy, _ := net.ParseCIDR("127.0.0.1/32")
	// As cmd/gateway wires it: asked only about the orders the store holds.
	var store *mysql.Store
	a, err := toss.New(toss.Config{SecretKey: tossKey, BaseURL: ts.URL, ClientKey: tossClient,
		KnownOrder: func(ctx context.Context, orderID string) (bool, error) {
			ps, err := store.PaymentsByOrder(ctx, orderID)
			return len(ps) > 0, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(s *envSetup) {
		s.adapter = a
		s.notices = func(st *mysql.Store) api.NoticeReceiver {
			store = st
			return notices.New(st, map[string]notices.Source{"toss": {PSP: "toss", Reader: a}}, notices.Config{Logger: log})
		}
		s.api = func(o *api.Options) {
			o.Now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
			o.TrustedProxies = []*net.IPNet{proxy}
			o.Logger = log
		}
	})
	v := e.createLater("k", `{"amount": 15000, "currency": "KRW", "confirm": false}`)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_key": "tgen_vbank_1", "amount": 15000, "order_id": "`+v.MerchantOrderID+`"}`), http.StatusAccepted)
	fake.Deposit(v.MerchantOrderID, true)
	post := func(body []byte, from string) (response, error) {
		return e.do(context.Background(), http.MethodPost, "/psp/toss/webhook", "",
			map[string]string{"Content-Type": "application/json", "X-Forwarded-For": from}, string(body))
	}
	// Toss's own notification, from Toss's address, settles the payment.
	res, err := post(tosstest.DepositCallback(v.MerchantOrderID, "DONE"), "192.0.2.10")
	if err != nil {
		t.Fatal(err)
	}
	wantReceived(t, res)
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.Succeeded {
		t.Fatalf("Toss's notification left the payment %s", got.Status)
	}

	// The flood, from one address, eight at a time: forged notifications
	// about orders the gateway does not hold, paymentKeys outside Toss's
	// alphabet, bodies naming nothing, and copies of a real notification.
	const posts = 1000
	calls, lines := fake.RequestCount(), logs.lines()
	var (
		wg       sync.WaitGroup
		next     atomic.Int64
		statuses sync.Map
		noRetry  atomic.Int64
	)
	real := fake.Notification(v.MerchantOrderID)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= posts {
					return
				}
				var body []byte
				switch i % 4 {
				case 0:
					body = []byte(fmt.Sprintf(`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_forged_%d","orderId":"ord_%024x","status":"DONE"}}`, i, i))
				case 1:
					body = []byte(fmt.Sprintf(`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"../orders/%d","orderId":"%s"}}`, i, v.MerchantOrderID))
				case 2:
					body = []byte(`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"status":"DONE"}}`)
				case 3:
					body = real
				}
				res, err := post(body, "203.0.113.66")
				if err != nil {
					statuses.Store(err.Error(), true)
					continue
				}
				n, _ := statuses.LoadOrStore(res.status, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if res.status == http.StatusTooManyRequests && res.header.Get("Retry-After") == "" {
					noRetry.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	count := map[any]int64{}
	statuses.Range(func(k, v any) bool {
		if n, ok := v.(*atomic.Int64); ok {
			count[k] = n.Load()
		} else {
			t.Errorf("a post failed: %v", k)
		}
		return true
	})
	tossCalls, logLines := fake.RequestCount()-calls, logs.lines()-lines
	t.Logf("%d posts: %d Toss calls, %d log lines, statuses %v", posts, tossCalls, logLines, count)
	if count[http.StatusTooManyRequests] != posts-api.DefaultNoticeBurst || noRetry.Load() != 0 {
		t.Fatalf("statuses %v (%d × 429 without Retry-After); want %d × 429, with Retry-After, past the address's burst",
			count, noRetry.Load(), posts-api.DefaultNoticeBurst)
	}
	// Only the copies of the real notification that were let through may ask Toss.
	if max := api.DefaultNoticeBurst / 4; tossCalls > max {
		t.Fatalf("%d posts cost %d Toss calls, want at most %d", posts, tossCalls, max)
	}
	if max := 3*api.DefaultNoticeBurst + 5; logLines > max {
		t.Fatalf("%d posts wrote %d log lines, want at most %d", posts, logLines, max)
	}
	// Toss's own address is served throughout.
	res, err = post(real, "192.0.2.10")
	if err != nil {
		t.Fatal(err)
	}
	wantReceived(t, res)
}

// lines is how many lines were written so far.
func (b *syncBuffer) lines() int {
	return strings.Count(b.text(), "\n")
}
