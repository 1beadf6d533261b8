package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"

	gateway "gateway/clients/go"
)

// pager serves GET /payments over ids[0] (newest) … ids[n-1] (oldest) as
// the gateway pages them: newest first, starting_after toward older,
// ending_before toward newer.
func pager(t *testing.T, n int) (*server, []string) {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("pay_%02d", i)
	}
	srv := newServer(t)
	srv.handler = func(r *http.Request) answer {
		q := r.URL.Query()
		limit := 10
		if l := q.Get("limit"); l != "" {
			limit, _ = strconv.Atoi(l)
		}
		lo, hi := 0, len(ids)
		if c := q.Get("starting_after"); c != "" {
			lo = slices.Index(ids, c) + 1
			hi = min(len(ids), lo+limit)
		} else if c := q.Get("ending_before"); c != "" {
			hi = slices.Index(ids, c)
			lo = max(0, hi-limit)
		} else {
			hi = min(len(ids), limit)
		}
		more := hi < len(ids)
		if q.Get("ending_before") != "" {
			more = lo > 0
		}
		var data []map[string]any
		for _, id := range ids[lo:hi] {
			data = append(data, map[string]any{"id": id, "status": "succeeded", "amount": 100, "currency": "KRW"})
		}
		b, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": more})
		return answer{status: 200, body: string(b)}
	}
	return srv, ids
}

func TestListWalksAllPages(t *testing.T) {
	srv, ids := pager(t, 25)
	client := mustClient(t, srv.URL, &waits{})
	var got []string
	for p, err := range client.Payments.List(context.Background(), &gateway.PaymentListParams{Limit: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("walked %v, want %v", got, ids)
	}
	var cursors []string
	for _, r := range srv.requests() {
		cursors = append(cursors, r.query)
	}
	want := []string{"limit=10", "limit=10&starting_after=pay_09", "limit=10&starting_after=pay_19"}
	if !slices.Equal(cursors, want) {
		t.Fatalf("queries %q, want %q", cursors, want)
	}
	// The sequence walks again from its start.
	n := 0
	for range client.Payments.List(context.Background(), &gateway.PaymentListParams{Limit: 10}) {
		n++
	}
	if n != 25 {
		t.Fatalf("the second walk yielded %d", n)
	}
}

func TestListBackward(t *testing.T) {
	srv, ids := pager(t, 25)
	client := mustClient(t, srv.URL, &waits{})
	var got []string
	for p, err := range client.Payments.List(context.Background(), &gateway.PaymentListParams{Limit: 10, EndingBefore: "pay_22"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.ID)
	}
	want := slices.Clone(ids[:22])
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("walked %v, want %v", got, want)
	}
}

// Breaking out of the loop stops the walk: no page more is read.
func TestListStopsWhenTheLoopDoes(t *testing.T) {
	srv, _ := pager(t, 25)
	client := mustClient(t, srv.URL, &waits{})
	n := 0
	for range client.Payments.List(context.Background(), &gateway.PaymentListParams{Limit: 10}) {
		if n++; n == 3 {
			break
		}
	}
	if got := len(srv.requests()); got != 1 {
		t.Fatalf("%d pages read, want 1", got)
	}
}

// A page's transient failure is retried within the walk; a refusal ends
// it, yielded once.
func TestListFailures(t *testing.T) {
	srv, _ := pager(t, 25)
	inner := srv.handler
	calls := 0
	srv.handler = func(r *http.Request) answer {
		calls++
		switch calls {
		case 2:
			return problem(503, "service-unavailable")
		case 4:
			return problem(400, "invalid-request")
		}
		return inner(r)
	}
	client := mustClient(t, srv.URL, &waits{})
	var got []string
	var errs []error
	for p, err := range client.Payments.List(context.Background(), &gateway.PaymentListParams{Limit: 10}) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, p.ID)
	}
	if len(got) != 20 || len(errs) != 1 || gateway.CodeOf(errs[0]) != gateway.CodeInvalidRequest {
		t.Fatalf("walked %d, errors %v", len(got), errs)
	}
}
