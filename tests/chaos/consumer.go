package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// eventConsumer is what a merchant's catch-up consumer does with GET
// /events: it pages on with its cursor (the last event it saw) against any
// replica, through the faults, as a merchant's server polls; after the run
// it pages on to the end. The invariant: it saw every event of its merchant
// exactly once. A listing that passed an event that committed late, or
// listed one twice, fails it.
type eventConsumer struct {
	base     []string
	apiKey   string
	merchant string
	http     *http.Client

	mu     sync.Mutex
	cursor string
	seen   map[string]int // event id → times listed
	pages  int
	errors int
}

func newEventConsumers(replicas []string, merchants []merchant) []*eventConsumer {
	out := make([]*eventConsumer, len(merchants))
	for i, m := range merchants {
		out[i] = &eventConsumer{base: replicas, apiKey: m.APIKey, merchant: m.ID, seen: map[string]int{},
			http: &http.Client{Timeout: 5 * time.Second}}
	}
	return out
}

// run polls until ctx ends.
func (ec *eventConsumer) run(ctx context.Context, r *rand.Rand) {
	for ctx.Err() == nil {
		if _, err := ec.page(ctx, ec.base[r.IntN(len(ec.base))]); err != nil {
			ec.mu.Lock()
			ec.errors++
			ec.mu.Unlock()
		}
		sleepCtx(ctx, time.Duration(50+r.IntN(200))*time.Millisecond)
	}
}

// drain pages on until two pages in a row come back empty.
func (ec *eventConsumer) drain(ctx context.Context) error {
	empty := 0
	for empty < 2 {
		n, err := ec.page(ctx, ec.base[0])
		if err != nil {
			return err
		}
		if n == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	return nil
}

// page reads the page after the cursor and says how many events it held.
func (ec *eventConsumer) page(ctx context.Context, base string) (int, error) {
	ec.mu.Lock()
	cursor := ec.cursor
	ec.mu.Unlock()
	u := base + "/events?limit=100"
	if cursor != "" {
		u += "&starting_after=" + url.QueryEscape(cursor)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+ec.apiKey)
	res, err := ec.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /events: %d", res.StatusCode)
	}
	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		return 0, err
	}
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.cursor != cursor {
		return 0, nil // another page moved on meanwhile (never: one consumer pages at a time)
	}
	ec.pages++
	for _, ev := range page.Data {
		ec.seen[ev.ID]++
	}
	if len(page.Data) > 0 {
		ec.cursor = page.Data[len(page.Data)-1].ID
	}
	return len(page.Data), nil
}

// checkConsumers is invariant 19: every merchant's consumer saw each of
// its merchant's events exactly once.
func (c *checker) checkConsumers(ctx context.Context, consumers []*eventConsumer) (*invariant, error) {
	inv := &invariant{ID: 19, Name: "a consumer paging GET /events with its cursor sees every event of its merchant exactly once"}
	for _, ec := range consumers {
		if err := ec.drain(ctx); err != nil {
			return nil, fmt.Errorf("the events consumer of %s could not page to the end: %w", ec.merchant, err)
		}
		var ids []string
		if err := c.e.db.SelectContext(ctx, &ids, `SELECT id FROM events WHERE merchant_id = ?`, ec.merchant); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		ec.mu.Lock()
		for _, id := range ids {
			inv.Checked++
			switch n := ec.seen[id]; {
			case n == 0:
				inv.fail("merchant %s's consumer, paging with its cursor, never saw event %s", ec.merchant, id)
			case n > 1:
				inv.fail("merchant %s's consumer saw event %s %d times", ec.merchant, id, n)
			}
		}
		if len(ec.seen) > len(ids) {
			inv.fail("merchant %s's consumer saw %d events, the database holds %d", ec.merchant, len(ec.seen), len(ids))
		}
		inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("merchant %s: %d events in %d pages (%d failed reads during the faults)",
			ec.merchant, len(ids), ec.pages, ec.errors))
		ec.mu.Unlock()
	}
	return inv, nil
}
