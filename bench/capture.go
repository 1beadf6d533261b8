package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gateway/payments"
)

// The capture scenario: each client captures, in full, authorizations made
// before the phase (manual payments in requires_capture, one row lock per
// capture), against the floor issuing the capture flow's statements. A
// capture uses up its authorization, so the setup authorizes, with as many
// clients, for captureMargin times the phase's warm-up and window: an
// authorization is about as much work as a capture (two short
// transactions, one PSP call), so that leaves some to spare even when the
// machine speeds up between the two. (Extrapolating from a timed first
// batch did not: a small batch runs slower than the phase, and a client
// ran out.) Short phases (the smoke run's) authorize for captureSetupMin,
// which covers the clients' first connections and the captures in flight
// when the window closes.
const (
	captureClients  = 64
	captureMargin   = 2
	captureSetupMin = 2 * time.Second
)

// authorizationBody is paymentBody with the money only authorized.
func authorizationBody(key string) []byte {
	return []byte(`{"amount":12500,"currency":"USD","payment_method":"pm_card_ok","description":"Order ` + key +
		`","metadata":{"order":` + strconv.Quote(key) + `,"channel":"web"},"capture_method":"manual"}`)
}

// authorizationRequest is authorizationBody as the service receives it.
func authorizationRequest(merchantID, key string) payments.CreateRequest {
	r := createRequest(merchantID, key)
	r.CaptureMethod = payments.CaptureManual
	return r
}

// capture posts the capture of the whole of authorization paymentID with key.
func (g *gateway) capture(ctx context.Context, hc *http.Client, paymentID, key string) error {
	a, err := g.postTo(ctx, hc, "/payments/"+paymentID+"/capture", g.apiKey, key, []byte(`{}`))
	if err != nil {
		return err
	}
	if a.status != http.StatusCreated || a.replayed {
		return fmt.Errorf("fresh capture: status %d (replayed %v): %.200s", a.status, a.replayed, a.body)
	}
	return nil
}

// authorizationPool hands out authorizations, each once.
type authorizationPool struct {
	ids  []string
	next atomic.Int64
}

// take is the next authorization to capture; an error when all are taken.
func (p *authorizationPool) take() (string, error) {
	i := p.next.Add(1) - 1
	if i >= int64(len(p.ids)) {
		return "", fmt.Errorf("no authorization left to capture: the setup made %d", len(p.ids))
	}
	return p.ids[i], nil
}

// capturable makes the authorizations a capture phase uses up (see
// captureMargin), through the API (so that the PSP's ledger holds them) or
// through the floor.
func (b *bench) capturable(ctx context.Context, hc *http.Client, phase string, floor bool) (*authorizationPool, error) {
	d := max(captureMargin*(b.opts.warmup+b.opts.duration), captureSetupMin)
	b.prog.line("authorizing payments to capture for %s", d)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  []string
		errs []error
	)
	for range captureClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for ctx.Err() == nil {
				key := fmt.Sprintf("%s-%s-auth-%07d", phase, b.nonce, n.Add(1))
				var id string
				var err error
				if floor {
					id, err = b.floorAuthorize(ctx, key)
				} else {
					id, err = b.authorize(ctx, hc, key)
				}
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					break
				}
				mine = append(mine, id)
			}
			mu.Lock()
			ids = append(ids, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("authorizations to capture: %w", errs[0])
	}
	b.prog.line("%d payments authorized", len(ids))
	return &authorizationPool{ids: ids}, nil
}

// authorize makes one manual payment through the API and returns its id.
func (b *bench) authorize(ctx context.Context, hc *http.Client, key string) (string, error) {
	a, err := b.gw.createPayment(ctx, hc, key, authorizationBody(key))
	if err != nil {
		return "", err
	}
	var v struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(a.body, &v); err != nil || a.status != http.StatusCreated || a.replayed ||
		v.Status != string(payments.RequiresCapture) {
		return "", fmt.Errorf("authorization: status %d (replayed %v): %.200s", a.status, a.replayed, a.body)
	}
	return v.ID, nil
}

func (b *bench) scenarioCapture(ctx context.Context, hc *http.Client, rep *report) error {
	var fls, gws []stats
	var rss int64
	for r := range b.opts.rounds {
		phase := fmt.Sprintf("f9r%d", r)
		pool, err := b.capturable(ctx, hc, phase, true)
		if err != nil {
			return err
		}
		f, err := b.runPhase(ctx, b.roundTitle("9 capture · floor", r), labels("floor", "capture"), group{name: "floor", clients: captureClients,
			op: func(ctx context.Context, c *client) error {
				id, err := pool.take()
				if err != nil {
					return err
				}
				return b.floorCapture(ctx, id, b.key(phase, c), 0)
			}})
		if err != nil {
			return err
		}
		gphase := fmt.Sprintf("g9r%d", r)
		var gpool *authorizationPool
		g, peak, err := b.gatewayPhaseAfter(ctx, b.roundTitle("9 capture · gateway", r), "capture",
			func() error {
				var err error
				gpool, err = b.capturable(ctx, hc, gphase, false)
				return err
			},
			group{name: "gateway", clients: captureClients, op: func(ctx context.Context, c *client) error {
				id, err := gpool.take()
				if err != nil {
					return err
				}
				return b.gw.capture(ctx, hc, id, b.key(gphase, c))
			}})
		if err != nil {
			return err
		}
		fls, gws, rss = append(fls, f[0]), append(gws, g[0]), max(rss, peak)
	}
	fl := mergeStats(fls)
	rep.add(row{Scenario: scCapture, Name: "captures of manual authorizations, 64 clients, PSP 0 ms", Unit: "req/s",
		Gateway: mergeStats(gws), Floor: &fl, FloorLabel: "raw SQL", Reference: fl.Throughput,
		Goal: 0.85, GoalText: ">= 0.85 x floor", PeakRSSBytes: rss})
	return nil
}
