package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/routing"
)

// AttemptNumber is the number of p's current attempt.
func (p Payment) AttemptNumber() int { return max(p.Attempt, 1) }

// AttemptStart is when p's current attempt started: its creation for the first.
func (p Payment) AttemptStart() time.Time {
	if p.AttemptAt.IsZero() {
		return p.CreatedAt
	}
	return p.AttemptAt
}

// AttemptOrderID is the order id of attempt n of the payment of (merchant,
// key): MerchantOrderID for the first, another of the same shape for each
// next one, so that no two attempts share one at any PSP.
func AttemptOrderID(merchantID, key string, n int) string {
	if n <= 1 {
		return MerchantOrderID(merchantID, key)
	}
	sum := sha256.Sum256([]byte(merchantID + "\x00" + key + "\x00attempt " + strconv.Itoa(n)))
	return "ord_" + hex.EncodeToString(sum[:12])
}

// routeOf is what a route's rules read of p.
func routeOf(p Payment) routing.Payment {
	return routing.Payment{MerchantID: p.MerchantID, Key: p.IdempotencyKey, Currency: p.Amount.Currency,
		Amount: p.Amount.Minor, PaymentMethod: p.PaymentMethod}
}

// route is the account a new payment goes to: the first candidate of its
// route whose breaker lets it through. A 422 when no account on the route
// can take it; a 503 service-unavailable (nothing stored: the key stays
// free) when every one that can is unhealthy, unless the key is claimed
// already (a retry answers from what it holds).
func (s *Service) route(ctx context.Context, ref idemkeys.Ref, p Payment) (string, error) {
	cands, err := s.psps.Candidates(routeOf(p), p.Manual())
	if err != nil {
		return "", routing.CannotAccept(err)
	}
	if name, ok := s.psps.Choose(cands, nil); ok {
		return name, nil
	}
	if _, err := s.store.Record(ctx, ref); err == nil {
		return "", idemkeys.ErrExists
	}
	return "", &errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second,
		Message: "no payment provider on this merchant's route is available right now; retry with the same Idempotency-Key"}
}

// failover starts the next attempt of a payment whose send certainly did
// nothing, at the next account of its route (a healthy one first), and
// sends it (design §16). ok is false when there is none to start: not a payment's charge, a
// confirm's (its front end holds the first account's client), no account
// left, or another send of the order id may still land (then the caller
// gives the key back as it would have).
func (s *Service) failover(a attempt, h holding, sub subject, cause error) (out Outcome, err error, ok bool) {
	ps, isCharge := sub.(paymentSubject)
	if !isCharge || ps.twoStep {
		return Outcome{}, nil, false
	}
	p := ps.p
	cands, cerr := s.psps.Candidates(routeOf(p), p.Manual())
	tried := []string{p.PSP}
	for _, t := range p.Attempts {
		tried = append(tried, t.PSP)
	}
	to, found := s.psps.Next(cands, tried)
	if cerr != nil || !found {
		return Outcome{}, nil, false
	}
	next := p
	next.Attempts = append(slices.Clip(p.Attempts), routing.Attempt{Number: p.AttemptNumber(), PSP: p.PSP,
		MerchantOrderID: p.MerchantOrderID, Outcome: routing.AttemptNotProcessed, PSPCode: rejectionCode(cause), StartedAt: p.AttemptStart()})
	next.Attempt = p.AttemptNumber() + 1
	next.PSP, next.MerchantOrderID = to, AttemptOrderID(p.MerchantID, p.IdempotencyKey, next.Attempt)
	armed, token := s.cfg.Now(), h.token.Next()
	at, ferr := s.store.Failover(s.writeCtx(a), a.ref, h.token, token, next, s.cfg.PSPTimeout)
	switch {
	case errors.Is(ferr, ErrArmRefused):
		return Outcome{}, nil, false
	case errors.Is(ferr, idemkeys.ErrFenced):
		s.obs.FencingRefused()
		out, err = s.join(a)
		return out, err, true
	case ferr != nil:
		// Committed or not, nothing of either attempt's order id was sent
		// that can land: give back whichever token now holds the lease.
		s.release(a, holding{token: token}, sub, true, nil)
		out, err = s.release(a, h, sub, true, pspError(cause))
		return out, err, true
	}
	h.token = token
	next.AttemptAt = at
	next.Attempts[len(next.Attempts)-1].EndedAt = at
	s.obs.FailedOver(p.PSP, to)
	s.log.WarnContext(a.client, "PSP did not process the charge: next attempt at the next account", s.hash.Attr(a.ref),
		"payment_id", p.ID, "from", p.PSP, "to", to, "attempt", next.Attempt, "err", cause)
	h.adapter, _ = s.psps.For(to)
	out, err = s.send(a, h, ps.as(next), armed.Add(s.cfg.PSPTimeout))
	return out, err, true
}

// AttemptView is an attempt as the API shows it; the current one's outcome
// is the payment's status.
type AttemptView struct {
	Attempt      int     `json:"attempt"`
	Account      string  `json:"account"`
	OrderID      string  `json:"order_id"`
	Outcome      string  `json:"outcome"`
	PSPReference *string `json:"psp_reference"`
}

// attemptViews are p's attempts, the earlier ones first, then its current one.
func attemptViews(p Payment) []AttemptView {
	out := make([]AttemptView, 0, len(p.Attempts)+1)
	for _, t := range p.Attempts {
		out = append(out, AttemptView{Attempt: t.Number, Account: t.PSP, OrderID: t.MerchantOrderID, Outcome: string(t.Outcome), PSPReference: nullable(t.PSPReference)})
	}
	return append(out, AttemptView{Attempt: p.AttemptNumber(), Account: p.PSP, OrderID: p.MerchantOrderID, Outcome: string(p.Status), PSPReference: nullable(p.PSPReference)})
}

// AttemptCheck is an earlier attempt the reconciler checks at its account
// now (design §16), with its payment as it stands. Mark is the claim's
// mark, the fence of the check's write.
type AttemptCheck struct {
	MerchantID, PaymentID string
	Attempt               routing.Attempt
	Checks                int
	Mark                  time.Time
	Payment               Payment
	// DBNow is the database's clock at the claim.
	DBNow time.Time
}
