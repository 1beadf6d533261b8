// Package fake owns an in-process fake payment service provider: a
// psp.Adapter that keeps its own ledger of charges, deduplicates on merchant
// order id like a real PSP, and can be told to fail, stall or block so that
// tests can drive the gateway through every outcome class (result, not
// processed, unknown). The gateway's GATEWAY_PSP=fake mode uses it too.
//
// Outcomes are deterministic by payment method:
//
//	pm_card_ok                 → Succeeded
//	pm_card_declined           → Declined, DeclineCode "card_declined"
//	pm_card_insufficient_funds → Declined, DeclineCode "insufficient_funds"
//	pm_card_lost               → Declined, DeclineCode "lost_card" (no shared name)
//	pm_card_3ds                → Pending with a NextAction (a redirect to
//	                             "/3ds/<reference>") when the request allows
//	                             one, else Declined "authentication_required"
//	pm_virtual_account         → Pending, no NextAction: a deposit is awaited
//	pm_invalid_request         → Rejected, Code "invalid_request", nothing recorded
//	anything else              → Declined, DeclineCode "invalid_payment_method"
//
// A decline's Code is its DeclineCode: the fake's raw codes are the shared
// ones. A Pending charge stays so until Settle finishes it, as the customer
// (3-D Secure passed or failed) or the bank (a deposit) would.
//
// The fake takes the currencies of Capabilities().Currencies (a few of each
// ISO 4217 exponent, in ISO units; WithCurrencies replaces them). A request it
// can never accept (an empty or too long order id, a non-positive amount, a
// currency it does not take, an amount Capabilities().Check refuses) is
// Rejected, wrapping ErrInvalidRequest, and nothing is recorded.
//
// A Charge call goes through these steps, in order:
//
//  1. it is counted (ChargeCalls) and the charge hook, if any, runs;
//  2. the request "travels" for the configured latency; if ctx is already done
//     or ends meanwhile, the call fails Unknown and the PSP never sees it;
//  3. the PSP receives it: the next queued fault, if any, is consumed;
//  4. the request is validated, deduplicated on MerchantOrderID and recorded;
//     an invalid request is refused Rejected, a reused order id with another
//     amount or currency NotProcessed (ErrOrderIDReused), and nothing is
//     recorded;
//  5. if a charge was recorded or deduplicated, the after hook, if any, runs
//     and, if ctx is done by now, the response is lost: the call fails Unknown
//     although the charge exists. Under FaultUnknownAfterCharge every answer
//     of step 4, refusals included, is lost the same way.
//
// Refund goes through the same steps without hooks, with its own fault queue
// (FailNextRefunds; "after charge" there means after the refund is recorded).
// A refund is refused as a RefundDeclined result, and not recorded, when the
// charge reference is unknown (charge_not_found), the charge was declined
// (charge_not_refundable) or less is left to refund than asked
// (amount_exceeds_refundable).
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"gateway/psp"
)

// Payment methods with a fixed outcome.
const (
	MethodOK                = "pm_card_ok"
	MethodDeclined          = "pm_card_declined"
	MethodInsufficientFunds = "pm_card_insufficient_funds"
	// MethodLostCard is declined with a code that has no shared name.
	MethodLostCard = "pm_card_lost"
	// MethodThreeDS needs the customer: Pending with a NextAction, or a
	// decline when the request allows none.
	MethodThreeDS = "pm_card_3ds"
	// MethodVirtualAccount is Pending until its deposit arrives (Settle).
	MethodVirtualAccount = "pm_virtual_account"
	// MethodInvalidRequest makes the PSP refuse the request as invalid.
	MethodInvalidRequest = "pm_invalid_request"
)

// Decline codes the fake produces.
const (
	DeclineCardDeclined         = psp.DeclineCardDeclined
	DeclineInsufficientFunds    = psp.DeclineInsufficientFunds
	DeclineInvalidPaymentMethod = psp.DeclineInvalidPaymentMethod
	DeclineLostCard             = "lost_card"
	DeclineAuthRequired         = "authentication_required"
	// CodeInvalidRequest is the raw code of every Rejected answer.
	CodeInvalidRequest = "invalid_request"
)

const (
	// maxOrderIDLen is the longest merchant order id the fake accepts.
	maxOrderIDLen = 64
	// defaultCreationWindow is what the fake advertises unless told otherwise.
	// The fake records charges synchronously, but callers size their waits on
	// this value, so it should look like a real PSP's.
	defaultCreationWindow = 2 * time.Minute
)

var (
	// ErrInvalidRequest is wrapped by the Rejected error returned for a
	// request the PSP can never accept (bad order id, amount or currency).
	ErrInvalidRequest = errors.New("fake psp: invalid request")
	// ErrNotPending is returned by Settle for a charge that is not Pending.
	ErrNotPending = errors.New("fake psp: no pending charge for this order id")
	// ErrOrderIDReused is wrapped by the NotProcessed error returned when an
	// order id already charged (or refund order id already refunded) is sent
	// again with a different amount or currency. It wraps psp.ErrOrderConflict.
	ErrOrderIDReused = fmt.Errorf("fake psp: order id reused: %w", psp.ErrOrderConflict)
	// ErrInjected is wrapped by every error produced by FailNextCharges or
	// FailNextLookups, so tests can tell injected faults from real ones.
	ErrInjected = errors.New("fake psp: injected fault")
)

// Fault is a failure injected into the next Charge call.
type Fault int

const (
	// FaultNotProcessed: the PSP refuses the call and does nothing.
	FaultNotProcessed Fault = iota + 1
	// FaultUnknownBeforeCharge: the call fails Unknown and the PSP did nothing,
	// e.g. the connection dropped before the request was read.
	FaultUnknownBeforeCharge
	// FaultUnknownAfterCharge: the PSP processes the call exactly as it would
	// without the fault (the charge is recorded or deduplicated), then the
	// response is lost and the call fails Unknown.
	FaultUnknownAfterCharge
)

func (f Fault) String() string {
	switch f {
	case FaultNotProcessed:
		return "not_processed"
	case FaultUnknownBeforeCharge:
		return "unknown_before_charge"
	case FaultUnknownAfterCharge:
		return "unknown_after_charge"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// ChargeHook observes a Charge call as it arrives.
type ChargeHook func(ctx context.Context, req psp.ChargeRequest)

// ChargeHookAfter observes a Charge call after the PSP has recorded c.
type ChargeHookAfter func(ctx context.Context, req psp.ChargeRequest, c psp.Charge)

// Option configures a PSP at construction.
type Option func(*PSP)

// WithCreationWindow sets the CreationWindow the PSP advertises in its
// Capabilities. Negative values are ignored.
func WithCreationWindow(d time.Duration) Option {
	return func(p *PSP) {
		if d >= 0 {
			p.creationWindow = d
		}
	}
}

// WithAccount sets the Account label the PSP advertises in its Capabilities.
func WithAccount(label string) Option {
	return func(p *PSP) { p.account = label }
}

// WithCurrencies replaces the currencies the PSP takes.
func WithCurrencies(cs ...psp.Currency) Option {
	return func(p *PSP) { p.currencies = append([]psp.Currency(nil), cs...) }
}

// Currencies returns the currencies the fake takes unless told otherwise: a
// few of each ISO 4217 exponent, counted in ISO minor units.
func Currencies() []psp.Currency {
	var cs []psp.Currency
	for exp, codes := range [...]string{
		0: "KRW JPY VND CLP ISK UGX",
		2: "USD EUR GBP CHF CAD AUD NZD SGD HKD CNY TWD INR IDR THB MYR PHP SEK NOK DKK PLN CZK HUF MXN BRL ZAR AED SAR MGA",
		3: "BHD JOD KWD OMR TND",
	} {
		for _, c := range strings.Fields(codes) {
			cs = append(cs, psp.Currency{Code: c, ISOExponent: exp, Exponent: exp})
		}
	}
	return cs
}

// PSP is the fake provider. The zero value is not usable; call New.
// All methods are safe for concurrent use.
type PSP struct {
	creationWindow time.Duration  // fixed after New
	account        string         // fixed after New
	currencies     []psp.Currency // fixed after New

	// mu guards everything below. Hooks are read under it but called outside
	// it, so a hook that blocks holds up only its own call.
	mu          sync.Mutex
	seq         int             // last reference number; never reset, so references stay unique
	records     []psp.Charge    // every charge, in creation order
	byOrder     map[string]int  // merchant order id → index into records
	refunds     []psp.Refund    // every refund made, in creation order
	byRefund    map[string]int  // refund order id → index into refunds
	chargeCalls int             // Charge calls received
	lookupCalls int             // Lookup and LookupRefund calls received
	refundCalls int             // Refund calls received
	chargeFault []Fault         // FIFO of faults for upcoming Charge calls
	refundFault []Fault         // FIFO of faults for upcoming Refund calls
	lookupFault int             // number of upcoming Lookup or LookupRefund calls to fail
	latency     time.Duration   // applied to every Charge and Lookup
	hook        ChargeHook      // may be nil
	hookAfter   ChargeHookAfter // may be nil
}

var _ psp.Adapter = (*PSP)(nil)

// New returns an empty PSP.
func New(opts ...Option) *PSP {
	p := &PSP{
		creationWindow: defaultCreationWindow,
		currencies:     Currencies(),
		byOrder:        make(map[string]int),
		byRefund:       make(map[string]int),
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Capabilities implements psp.Adapter. The fake's lookup is authoritative
// because charges are recorded before Charge returns: once a call has
// returned, its charge exists or never will. Currencies is shared: callers
// must not modify it.
func (p *PSP) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                "fake",
		AuthoritativeLookup: true,
		CreationWindow:      p.creationWindow,
		DedupesOrderID:      true,
		MaxOrderIDLen:       maxOrderIDLen,
		Account:             p.account,
		Currencies:          p.currencies,
		// Its payment methods are fixed names: nothing to start at a front end.
		Checkout: psp.Checkout{Client: psp.ClientNone, ResultField: psp.ResultPaymentMethod},
	}
}

// Charge implements psp.Adapter; see the package documentation for the order
// in which hooks, latency, faults and recording happen.
func (p *PSP) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	c, _, err := p.ChargeCreated(ctx, req)
	return c, err
}

// ChargeCreated is Charge that also reports whether this call recorded the
// charge (false when it returned an earlier charge for the same order id);
// the standalone fake PSP server answers 201 or 200 from it.
func (p *PSP) ChargeCreated(ctx context.Context, req psp.ChargeRequest) (psp.Charge, bool, error) {
	p.mu.Lock()
	p.chargeCalls++
	hook, hookAfter, latency := p.hook, p.hookAfter, p.latency
	p.mu.Unlock()

	if hook != nil {
		hook(ctx, req)
	}
	if err := wait(ctx, latency); err != nil {
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: "charge", Err: err}
	}

	c, created, lost, err := p.process(req)
	if err != nil && !lost {
		return psp.Charge{}, false, err
	}
	if err == nil && hookAfter != nil {
		hookAfter(ctx, req, c)
	}
	if lost {
		// The PSP did its work, whatever it was; the caller never learns it.
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: "charge", Err: injected(FaultUnknownAfterCharge)}
	}
	// The charge exists now. A caller whose deadline passed meanwhile has
	// stopped listening, so it must treat the call as Unknown.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: "charge", Err: ctxErr}
	}
	return c, created, nil
}

// process is the PSP's side of a Charge: it consumes the next fault and, unless
// the fault stops it, validates, deduplicates and records the charge, all in
// one critical section so that concurrent calls for one order id make one
// record. created reports a new record; lost reports FaultUnknownAfterCharge:
// the work was done but the response must not reach the caller.
func (p *PSP) process(req psp.ChargeRequest) (c psp.Charge, created, lost bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	fault := next(&p.chargeFault)
	switch fault {
	case FaultNotProcessed:
		return psp.Charge{}, false, false, &psp.Error{Class: psp.NotProcessed, Op: "charge", Err: injected(fault)}
	case FaultUnknownBeforeCharge:
		return psp.Charge{}, false, false, &psp.Error{Class: psp.Unknown, Op: "charge", Err: injected(fault)}
	}
	lost = fault == FaultUnknownAfterCharge

	if err := p.validate(req); err != nil {
		return psp.Charge{}, false, lost, rejected("charge", err)
	}
	if req.PaymentMethod == MethodInvalidRequest {
		return psp.Charge{}, false, lost, rejected("charge", fmt.Errorf("%w: the payment method cannot be charged as sent", ErrInvalidRequest))
	}
	if i, ok := p.byOrder[req.MerchantOrderID]; ok {
		c := p.records[i]
		if c.Amount != req.Amount || c.Currency != req.Currency {
			return psp.Charge{}, false, lost, &psp.Error{Class: psp.NotProcessed, Op: "charge",
				Err: fmt.Errorf("%w: order %q was charged %d %s, now asked for %d %s",
					ErrOrderIDReused, req.MerchantOrderID, c.Amount, c.Currency, req.Amount, req.Currency)}
		}
		return c, false, lost, nil
	}

	p.seq++
	c = psp.Charge{
		MerchantOrderID: req.MerchantOrderID,
		Reference:       fmt.Sprintf("fake_ch_%d", p.seq),
		Amount:          req.Amount,
		Currency:        req.Currency,
	}
	c.Status, c.DeclineCode = outcome(req.PaymentMethod, req.AllowNextAction)
	c.Code = c.DeclineCode
	if c.Status == psp.Pending && req.PaymentMethod == MethodThreeDS {
		c.NextAction = &psp.NextAction{Type: psp.NextActionRedirect, URL: "/3ds/" + c.Reference}
	}
	p.byOrder[c.MerchantOrderID] = len(p.records)
	p.records = append(p.records, c)
	return c, true, lost, nil
}

// next pops the oldest queued fault, or returns 0 when none is queued.
func next(q *[]Fault) Fault {
	if len(*q) == 0 {
		return 0
	}
	f := (*q)[0]
	*q = (*q)[1:]
	return f
}

// Lookup implements psp.Adapter. It returns psp.ErrNotFound itself (not
// wrapped in a *psp.Error) when the PSP has no charge for the order id.
func (p *PSP) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	if merchantOrderID == "" {
		return psp.Charge{}, rejected("lookup", fmt.Errorf("%w: empty merchant order id", ErrInvalidRequest))
	}
	p.mu.Lock()
	p.lookupCalls++
	latency := p.latency
	p.mu.Unlock()

	if err := wait(ctx, latency); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: "lookup", Err: err}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lookupFault > 0 {
		p.lookupFault--
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: "lookup", Err: ErrInjected}
	}
	i, ok := p.byOrder[merchantOrderID]
	if !ok {
		return psp.Charge{}, psp.ErrNotFound
	}
	return p.records[i], nil
}

// ThreeDS is the customer's answer on the 3-D Secure page of the pending
// charge with reference: it passes (the charge succeeds) or fails (declined
// "authentication_failed"), and says what the page shows. ErrNotFound for no
// such charge, ErrNotPending for one not waiting for 3-D Secure.
func (p *PSP) ThreeDS(reference string, passed bool) (psp.Charge, string, error) {
	for _, c := range p.Charges() {
		if c.Reference != reference {
			continue
		}
		status, code, say := psp.Succeeded, "", "3-D Secure passed; the payment succeeded. Return to the merchant."
		if !passed {
			status, code, say = psp.Declined, "authentication_failed", "3-D Secure failed; the payment was declined. Return to the merchant."
		}
		c, err := p.Settle(c.MerchantOrderID, status, code)
		return c, say, err
	}
	return psp.Charge{}, "", fmt.Errorf("fake psp: no charge %s: %w", reference, psp.ErrNotFound)
}

// ThreeDSPage serves the 3-D Secure page a pending pm_card_3ds charge's next
// action sends the customer to, GET /3ds/{reference} (?result=failed fails
// it), for a gateway that runs this fake in its own process: its relative
// URL resolves there.
func (p *PSP) ThreeDSPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ref := strings.TrimPrefix(r.URL.Path, "/3ds/")
		if r.Method != http.MethodGet || ref == r.URL.Path || ref == "" {
			http.NotFound(w, r)
			return
		}
		_, say, err := p.ThreeDS(ref, r.URL.Query().Get("result") != "failed")
		switch {
		case errors.Is(err, psp.ErrNotFound):
			http.Error(w, "no charge with this reference", http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, "this payment is not waiting for 3-D Secure", http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, say+"\n")
	})
}

// Settle finishes the Pending charge for merchantOrderID as the customer or
// the bank would: status Succeeded, or Declined with declineCode (which is
// also its raw Code). It returns the charge as it now stands, and
// ErrNotPending when there is no Pending charge for the order id.
func (p *PSP) Settle(merchantOrderID string, status psp.ChargeStatus, declineCode string) (psp.Charge, error) {
	if status != psp.Succeeded && status != psp.Declined {
		return psp.Charge{}, fmt.Errorf("fake psp: a charge settles succeeded or declined, not %q", status)
	}
	if status == psp.Succeeded {
		declineCode = ""
	} else if declineCode == "" {
		declineCode = DeclineCardDeclined
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byOrder[merchantOrderID]
	if !ok || p.records[i].Status != psp.Pending {
		return psp.Charge{}, ErrNotPending
	}
	c := &p.records[i]
	c.Status, c.DeclineCode, c.Code, c.NextAction = status, declineCode, declineCode, nil
	return *c, nil
}

// Refund implements psp.Adapter; see the package documentation.
func (p *PSP) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	r, _, err := p.RefundCreated(ctx, req)
	return r, err
}

// RefundCreated is Refund that also reports whether this call recorded the
// refund (false for a repeat of an earlier refund, and for a declined one).
func (p *PSP) RefundCreated(ctx context.Context, req psp.RefundRequest) (psp.Refund, bool, error) {
	p.mu.Lock()
	p.refundCalls++
	latency := p.latency
	p.mu.Unlock()

	if err := wait(ctx, latency); err != nil {
		return psp.Refund{}, false, &psp.Error{Class: psp.Unknown, Op: "refund", Err: err}
	}
	r, created, lost, err := p.processRefund(req)
	switch {
	case lost:
		return psp.Refund{}, false, &psp.Error{Class: psp.Unknown, Op: "refund", Err: injected(FaultUnknownAfterCharge)}
	case err != nil:
		return psp.Refund{}, false, err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return psp.Refund{}, false, &psp.Error{Class: psp.Unknown, Op: "refund", Err: ctxErr}
	}
	return r, created, nil
}

// processRefund is the PSP's side of a Refund, in one critical section like
// process.
func (p *PSP) processRefund(req psp.RefundRequest) (r psp.Refund, created, lost bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	fault := next(&p.refundFault)
	switch fault {
	case FaultNotProcessed:
		return psp.Refund{}, false, false, &psp.Error{Class: psp.NotProcessed, Op: "refund", Err: injected(fault)}
	case FaultUnknownBeforeCharge:
		return psp.Refund{}, false, false, &psp.Error{Class: psp.Unknown, Op: "refund", Err: injected(fault)}
	}
	lost = fault == FaultUnknownAfterCharge

	if err := p.validateRefund(req); err != nil {
		return psp.Refund{}, false, lost, rejected("refund", err)
	}
	if i, ok := p.byRefund[req.RefundOrderID]; ok {
		r := p.refunds[i]
		if r.Amount != req.Amount || r.Currency != req.Currency || r.MerchantOrderID != req.MerchantOrderID {
			return psp.Refund{}, false, lost, &psp.Error{Class: psp.NotProcessed, Op: "refund",
				Err: fmt.Errorf("%w: refund %q was %d %s of %q, now asked for %d %s of %q", ErrOrderIDReused,
					req.RefundOrderID, r.Amount, r.Currency, r.MerchantOrderID, req.Amount, req.Currency, req.MerchantOrderID)}
		}
		return r, false, lost, nil
	}

	r = psp.Refund{
		RefundOrderID:   req.RefundOrderID,
		MerchantOrderID: req.MerchantOrderID,
		Amount:          req.Amount,
		Currency:        req.Currency,
		Status:          psp.RefundDeclined,
	}
	i, ok := p.byOrder[req.MerchantOrderID]
	if !ok || p.records[i].Reference != req.ChargeReference {
		r.DeclineCode, r.Code = psp.RefundDeclineChargeNotFound, psp.RefundDeclineChargeNotFound
		return r, false, lost, nil
	}
	c := p.records[i]
	if c.Currency != req.Currency {
		return psp.Refund{}, false, lost, rejected("refund",
			fmt.Errorf("%w: charge %q is in %s, refund asked in %s", ErrInvalidRequest, c.Reference, c.Currency, req.Currency))
	}
	if c.Status != psp.Succeeded {
		r.DeclineCode, r.Code = psp.RefundDeclineNotRefundable, psp.RefundDeclineNotRefundable
		return r, false, lost, nil
	}
	left := c.Amount
	for _, done := range p.refunds {
		if done.MerchantOrderID == c.MerchantOrderID {
			left -= done.Amount
		}
	}
	if req.Amount > left {
		r.DeclineCode, r.Code = psp.RefundDeclineAmountExceeded, psp.RefundDeclineAmountExceeded
		return r, false, lost, nil
	}

	p.seq++
	r.Reference = fmt.Sprintf("fake_re_%d", p.seq)
	r.Status = psp.RefundSucceeded
	p.byRefund[r.RefundOrderID] = len(p.refunds)
	p.refunds = append(p.refunds, r)
	return r, true, lost, nil
}

// LookupRefund implements psp.Adapter. It returns psp.ErrNotFound itself
// when no refund was made for refundOrderID against chargeReference; it
// shares Lookup's latency and fault counter.
func (p *PSP) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	if chargeReference == "" || refundOrderID == "" {
		return psp.Refund{}, rejected("lookup_refund", fmt.Errorf("%w: a refund lookup needs the charge reference and the refund order id", ErrInvalidRequest))
	}
	p.mu.Lock()
	p.lookupCalls++
	latency := p.latency
	p.mu.Unlock()

	if err := wait(ctx, latency); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: "lookup_refund", Err: err}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lookupFault > 0 {
		p.lookupFault--
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: "lookup_refund", Err: ErrInjected}
	}
	i, ok := p.byRefund[refundOrderID]
	if !ok {
		return psp.Refund{}, psp.ErrNotFound
	}
	r := p.refunds[i]
	if c := p.records[p.byOrder[r.MerchantOrderID]]; c.Reference != chargeReference {
		return psp.Refund{}, psp.ErrNotFound
	}
	return r, nil
}

// FailNextRefunds queues n faults of kind f for upcoming Refund calls, like
// FailNextCharges does for charges.
func (p *PSP) FailNextRefunds(f Fault, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.refundFault = append(p.refundFault, f)
	}
}

// FailNextCharges queues n faults of kind f behind any already queued. Each
// Charge call that reaches the PSP (one whose ctx did not end during the
// latency wait) consumes one fault, oldest first.
func (p *PSP) FailNextCharges(f Fault, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.chargeFault = append(p.chargeFault, f)
	}
}

// FailNextLookups makes the next n Lookup or LookupRefund calls that reach
// the PSP fail Unknown, in addition to any already queued.
func (p *PSP) FailNextLookups(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > 0 {
		p.lookupFault += n
	}
}

// SetLatency makes every later Charge and Lookup wait d before reaching the
// PSP. Zero removes the latency.
func (p *PSP) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// SetChargeHook installs h to run at the start of every Charge, before
// latency, faults and recording, outside the PSP's lock: a hook that blocks
// delays only its own call. nil removes the hook.
func (p *PSP) SetChargeHook(h ChargeHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = h
}

// SetChargeHookAfter installs h to run after a Charge has been recorded (or
// deduplicated) and before the call returns, outside the PSP's lock. A hook
// that blocks models a slow response after the PSP acted; if ctx is done when
// it returns, the call fails Unknown. nil removes the hook.
func (p *PSP) SetChargeHookAfter(h ChargeHookAfter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hookAfter = h
}

// Reset forgets every charge, refund and call count and removes faults, hooks and
// latency, leaving the PSP as New made it. Reference numbers keep counting so
// that references stay unique over the PSP's life.
func (p *PSP) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = nil
	p.byOrder = make(map[string]int)
	p.refunds = nil
	p.byRefund = make(map[string]int)
	p.chargeCalls, p.lookupCalls, p.refundCalls = 0, 0, 0
	p.chargeFault, p.refundFault, p.lookupFault = nil, nil, 0
	p.latency = 0
	p.hook, p.hookAfter = nil, nil
}

// Charges returns a copy of every charge record, succeeded or declined, in
// creation order.
func (p *PSP) Charges() []psp.Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]psp.Charge(nil), p.records...)
}

// ChargeCount is the number of charge records, succeeded or declined.
func (p *PSP) ChargeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.records)
}

// SucceededCount is the number of charges that moved money.
func (p *PSP) SucceededCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.records {
		if c.Status == psp.Succeeded {
			n++
		}
	}
	return n
}

// ChargeCalls is the number of Charge calls received, including rejected,
// deduplicated and faulted ones.
func (p *PSP) ChargeCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chargeCalls
}

// LookupCalls is the number of Lookup calls received, including faulted ones.
func (p *PSP) LookupCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookupCalls
}

// ChargesFor is the number of charge records for orderID. It scans the ledger
// rather than the dedupe index, so an at-most-once assertion built on it would
// catch a dedupe bug instead of trusting it.
func (p *PSP) ChargesFor(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.records {
		if c.MerchantOrderID == orderID {
			n++
		}
	}
	return n
}

// Refunds returns a copy of every refund made, in creation order. Declined
// refunds leave no record.
func (p *PSP) Refunds() []psp.Refund {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]psp.Refund(nil), p.refunds...)
}

// RefundsFor is the number of refund records for refundOrderID, counted by
// scanning the ledger like ChargesFor.
func (p *PSP) RefundsFor(refundOrderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.refunds {
		if r.RefundOrderID == refundOrderID {
			n++
		}
	}
	return n
}

// RefundCalls is the number of Refund calls received, including refused,
// deduplicated and faulted ones.
func (p *PSP) RefundCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refundCalls
}

// wait models the request's trip to the PSP. A ctx that is already done, or
// ends during the trip, means the PSP never got the request; the caller cannot
// know that, hence Unknown.
func wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *PSP) validate(req psp.ChargeRequest) error {
	if err := validOrderID("merchant", req.MerchantOrderID); err != nil {
		return err
	}
	return p.validAmount(req.Amount, req.Currency)
}

func (p *PSP) validateRefund(req psp.RefundRequest) error {
	if err := validOrderID("refund", req.RefundOrderID); err != nil {
		return err
	}
	return p.validAmount(req.Amount, req.Currency)
}

func validOrderID(kind, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty %s order id", ErrInvalidRequest, kind)
	case len(id) > maxOrderIDLen:
		return fmt.Errorf("%w: %s order id is %d bytes, longer than %d", ErrInvalidRequest, kind, len(id), maxOrderIDLen)
	}
	return nil
}

func (p *PSP) validAmount(amount int64, currency string) error {
	if err := p.Capabilities().Check(amount, currency); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

func rejected(op string, err error) *psp.Error {
	return &psp.Error{Class: psp.Rejected, Op: op, Code: CodeInvalidRequest, Err: err}
}

func outcome(method string, allowAction bool) (psp.ChargeStatus, string) {
	switch method {
	case MethodOK:
		return psp.Succeeded, ""
	case MethodDeclined:
		return psp.Declined, DeclineCardDeclined
	case MethodInsufficientFunds:
		return psp.Declined, DeclineInsufficientFunds
	case MethodLostCard:
		return psp.Declined, DeclineLostCard
	case MethodThreeDS:
		if allowAction {
			return psp.Pending, ""
		}
		return psp.Declined, DeclineAuthRequired
	case MethodVirtualAccount:
		return psp.Pending, ""
	}
	return psp.Declined, DeclineInvalidPaymentMethod
}

func injected(f Fault) error { return fmt.Errorf("%w: %s", ErrInjected, f) }
