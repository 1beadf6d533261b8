package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"gateway/payments"
)

// The refund scenario: fresh partial refunds of succeeded payments, each
// client refunding a payment of its own again and again (one row lock per
// client, as distinct payments would have), against the floor issuing the
// refund flow's statements.
const (
	refundClients = 64
	// refundAmount is small enough that a payment of 12500 takes every
	// refund a client makes in a phase.
	refundAmount = 10
	refundReason = "requested_by_customer"
)

// refundBody is the request body of a refund made with key.
func refundBody(key string) []byte {
	return []byte(`{"amount":` + strconv.Itoa(refundAmount) + `,"reason":"` + refundReason +
		`","metadata":{"order":` + strconv.Quote(key) + `}}`)
}

// refundRequest is refundBody as the service receives it.
func refundRequest(merchantID, paymentID, key string) payments.RefundRequest {
	amount := int64(refundAmount)
	return payments.RefundRequest{MerchantID: merchantID, PaymentID: paymentID, IdempotencyKey: key,
		Amount: &amount, Reason: refundReason, Metadata: map[string]string{"order": key}}
}

// createRequest is paymentBody as the service receives it.
func createRequest(merchantID, key string) payments.CreateRequest {
	return payments.CreateRequest{MerchantID: merchantID, IdempotencyKey: key,
		Amount: payments.Money{Minor: 12500, Currency: "USD"}, PaymentMethod: "pm_card_ok",
		Description: "Order " + key, Metadata: map[string]string{"order": key, "channel": "web"}}
}

// refund posts one refund of paymentID with key for the bench merchant.
func (g *gateway) refund(ctx context.Context, hc *http.Client, paymentID, key string) (answer, error) {
	a, err := g.postTo(ctx, hc, "/payments/"+paymentID+"/refunds", g.apiKey, key, refundBody(key))
	if err != nil {
		return answer{}, err
	}
	if a.status != http.StatusCreated || a.replayed {
		return a, fmt.Errorf("fresh refund: status %d (replayed %v): %.200s", a.status, a.replayed, a.body)
	}
	return a, nil
}

// paymentsFor makes one succeeded payment per client (ids from 1) and
// returns their ids by client id: through the API, so that the PSP's
// ledger holds their charges, or through the floor.
func (b *bench) paymentsFor(ctx context.Context, hc *http.Client, phase string, clients int, floor bool) ([]string, error) {
	ids := make([]string, clients+1)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for c := 1; c <= clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s-%s-pay-c%03d", phase, b.nonce, c)
			var err error
			if floor {
				if err = b.floorFresh(ctx, key, 0); err == nil {
					ids[c], err = b.floorPaymentID(ctx, key)
				}
			} else {
				var a answer
				if a, err = b.gw.createPayment(ctx, hc, key, paymentBody(key)); err == nil {
					if err = wantFresh(a); err == nil {
						var v struct {
							ID string `json:"id"`
						}
						err = json.Unmarshal(a.body, &v)
						ids[c] = v.ID
					}
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("payments to refund: %w", errs[0])
	}
	return ids, nil
}

func (b *bench) scenarioRefund(ctx context.Context, hc *http.Client, rep *report) error {
	var fls, gws []stats
	var rss int64
	for r := range b.opts.rounds {
		phase := fmt.Sprintf("f6r%d", r)
		ids, err := b.paymentsFor(ctx, hc, phase, refundClients, true)
		if err != nil {
			return err
		}
		f, err := b.runPhase(ctx, b.roundTitle("7 refund · floor", r), labels("floor", "refund"), group{name: "floor", clients: refundClients,
			op: func(ctx context.Context, c *client) error { return b.floorRefund(ctx, ids[c.id], b.key(phase, c)) }})
		if err != nil {
			return err
		}
		phase = fmt.Sprintf("g6r%d", r)
		var gids []string
		g, peak, err := b.gatewayPhaseAfter(ctx, b.roundTitle("7 refund · gateway", r), "refund",
			func() error {
				var err error
				gids, err = b.paymentsFor(ctx, hc, phase, refundClients, false)
				return err
			},
			group{name: "gateway", clients: refundClients, op: func(ctx context.Context, c *client) error {
				_, err := b.gw.refund(ctx, hc, gids[c.id], b.key(phase, c))
				return err
			}})
		if err != nil {
			return err
		}
		fls, gws, rss = append(fls, f[0]), append(gws, g[0]), max(rss, peak)
	}
	fl := mergeStats(fls)
	rep.add(row{Scenario: scRefund, Name: "fresh refunds of succeeded payments, 64 clients, PSP 0 ms", Unit: "req/s",
		Gateway: mergeStats(gws), Floor: &fl, FloorLabel: "raw SQL", Reference: fl.Throughput,
		Goal: 0.80, GoalText: ">= 0.80 x floor", PeakRSSBytes: rss})
	return nil
}
