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
// charge reference is unknown (charge_not_found), the charge did not succeed
// (charge_not_refundable) or less is left to refund than was captured
// (amount_exceeds_refundable).
//
// Manual capture (psp.Capturer): a charge with CaptureMethod CaptureManual
// whose payment method succeeds is Authorized instead, capturable until its
// CaptureBefore, the fake's clock (WithClock) plus AuthorizationValidity (7
// days; WithAuthorizationValidity), cut to the second. An authorization
// still there at CaptureBefore lapses to Voided, as a card network's does,
// and Lapse makes one lapse at once. Capture takes at most the authorized
// amount, once per authorization as at Stripe: the rest is released, and a
// capture with another order id takes nothing and answers the captured
// charge. Void releases an authorization, or cancels a manual charge still
// Pending. Both deduplicate on their order id (a repeat answers the charge
// as it stands and moves nothing more; the order id with another amount or
// charge is refused NotProcessed, ErrOrderIDReused), answer a charge that
// can no longer be captured or voided as it stands, and refuse Rejected a
// request that can never succeed (a charge the fake does not know, more than
// the authorized amount). They go through the steps of a Charge, with hooks
// of their own (SetCaptureHook, SetVoidHook and their After kinds) and fault
// queues (FailNextCaptures, FailNextVoids; "after charge" means after the
// capture or void was made). Captures and Voids list the ledger.
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
	// DefaultAuthorizationValidity is how long an authorization stays
	// capturable unless told otherwise: a card network's usual 7 days.
	DefaultAuthorizationValidity = 7 * 24 * time.Hour
)

var (
	// ErrInvalidRequest is wrapped by the Rejected error returned for a
	// request the PSP can never accept (bad order id, amount or currency).
	ErrInvalidRequest = errors.New("fake psp: invalid request")
	// ErrNotPending is returned by Settle for a charge that is not Pending.
	ErrNotPending = errors.New("fake psp: no pending charge for this order id")
	// ErrNotAuthorized is returned by Lapse for a charge that is not Authorized.
	ErrNotAuthorized = errors.New("fake psp: no authorized charge for this order id")
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

// CaptureHook observes a Capture call as it arrives.
type CaptureHook func(ctx context.Context, req psp.CaptureRequest)

// CaptureHookAfter observes a Capture call after the PSP answered it with c
// (the capture made, or the charge as it stands).
type CaptureHookAfter func(ctx context.Context, req psp.CaptureRequest, c psp.Charge)

// VoidHook observes a Void call as it arrives.
type VoidHook func(ctx context.Context, req psp.VoidRequest)

// VoidHookAfter observes a Void call after the PSP answered it with c.
type VoidHookAfter func(ctx context.Context, req psp.VoidRequest, c psp.Charge)

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

// WithClock makes the PSP read the time from now instead of time.Now: when
// an authorization is made and when it lapses. now must not call the PSP.
func WithClock(now func() time.Time) Option {
	return func(p *PSP) {
		if now != nil {
			p.now = now
		}
	}
}

// WithAuthorizationValidity sets how long an authorization stays capturable
// (DefaultAuthorizationValidity unless set); values below a second are
// ignored.
func WithAuthorizationValidity(d time.Duration) Option {
	return func(p *PSP) {
		if d >= time.Second {
			p.validity = d
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
	creationWindow time.Duration    // fixed after New
	account        string           // fixed after New
	currencies     []psp.Currency   // fixed after New
	now            func() time.Time // fixed after New
	validity       time.Duration    // fixed after New

	// mu guards everything below. Hooks are read under it but called outside
	// it, so a hook that blocks holds up only its own call.
	mu           sync.Mutex
	seq          int              // last reference number; never reset, so references stay unique
	records      []record         // every charge, in creation order
	byOrder      map[string]int   // merchant order id → index into records
	refunds      []psp.Refund     // every refund made, in creation order
	byRefund     map[string]int   // refund order id → index into refunds
	captures     []Capture        // every capture made, in creation order
	byCapture    map[string]int   // capture order id → index into captures
	voids        []Void           // every void made, in creation order
	byVoid       map[string]int   // void order id → index into voids
	chargeCalls  int              // Charge calls received
	lookupCalls  int              // Lookup and LookupRefund calls received
	refundCalls  int              // Refund calls received
	captureCalls int              // Capture calls received
	voidCalls    int              // Void calls received
	chargeFault  []Fault          // FIFO of faults for upcoming Charge calls
	refundFault  []Fault          // FIFO of faults for upcoming Refund calls
	captureFault []Fault          // FIFO of faults for upcoming Capture calls
	voidFault    []Fault          // FIFO of faults for upcoming Void calls
	lookupFault  int              // number of upcoming Lookup or LookupRefund calls to fail
	latency      time.Duration    // applied to every call
	hook         ChargeHook       // may be nil
	hookAfter    ChargeHookAfter  // may be nil
	captureHook  CaptureHook      // may be nil
	captureAfter CaptureHookAfter // may be nil
	voidHook     VoidHook         // may be nil
	voidAfter    VoidHookAfter    // may be nil
	ledger       []ledgerLine     // every charge and refund, in the order the PSP made them
	ledgerFault  int              // number of upcoming ListTransactions calls to fail
}

// record is the fake's own record of a charge: the charge as the PSP shows
// it, and what only the PSP keeps.
type record struct {
	c      psp.Charge // CaptureBefore stays zero here: view sets it
	manual bool       // made with CaptureManual
	// captureBefore is when an authorization lapses; zero for a charge
	// never authorized.
	captureBefore time.Time
	lapsed        bool // voided by its lapse, not by a Void
	merchantID    string
}

// view is the charge as the PSP answers it.
func (r record) view() psp.Charge {
	c := r.c
	if c.Status == psp.Authorized {
		c.CaptureBefore = r.captureBefore
	}
	return c
}

// Capture is a capture the PSP made: money taken from an authorization.
type Capture struct {
	OrderID         string
	MerchantOrderID string
	ChargeReference string
	// Reference is the PSP's own identifier for the capture.
	Reference string
	Amount    int64
	Currency  string
}

// Void is an authorization (or a pending manual charge) the PSP released
// on a Void call. A lapse leaves none: see Authorizations.
type Void struct {
	OrderID         string
	MerchantOrderID string
	ChargeReference string
	Reason          string
}

// Authorization is a charge that was authorized, as it stands now.
type Authorization struct {
	Charge psp.Charge
	// CaptureBefore is when it lapses (or lapsed), whatever its status.
	CaptureBefore time.Time
	// Lapsed says it was voided by its lapse rather than by a Void.
	Lapsed bool
}

var (
	_ psp.Adapter  = (*PSP)(nil)
	_ psp.Capturer = (*PSP)(nil)
	_ psp.Ledger   = (*PSP)(nil)
)

// New returns an empty PSP.
func New(opts ...Option) *PSP {
	p := &PSP{
		creationWindow: defaultCreationWindow,
		currencies:     Currencies(),
		now:            time.Now,
		validity:       DefaultAuthorizationValidity,
		byOrder:        make(map[string]int),
		byRefund:       make(map[string]int),
		byCapture:      make(map[string]int),
		byVoid:         make(map[string]int),
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
		Checkout:              psp.Checkout{Client: psp.ClientNone, ResultField: psp.ResultPaymentMethod},
		ManualCapture:         true,
		AuthorizationValidity: p.validity,
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
	manual := req.CaptureMethod == psp.CaptureManual
	if i, ok := p.byOrder[req.MerchantOrderID]; ok {
		r := p.current(i)
		if r.c.Amount != req.Amount || r.c.Currency != req.Currency || r.manual != manual {
			return psp.Charge{}, false, lost, &psp.Error{Class: psp.NotProcessed, Op: "charge",
				Err: fmt.Errorf("%w: order %q was charged %d %s (%s capture), now asked for %d %s (%s capture)",
					ErrOrderIDReused, req.MerchantOrderID, r.c.Amount, r.c.Currency, captureMethod(r.manual),
					req.Amount, req.Currency, captureMethod(manual))}
		}
		return r.view(), false, lost, nil
	}

	p.seq++
	r := record{manual: manual, c: psp.Charge{
		MerchantOrderID: req.MerchantOrderID,
		Reference:       fmt.Sprintf("fake_ch_%d", p.seq),
		Amount:          req.Amount,
		Currency:        req.Currency,
	}}
	status, code := outcome(req.PaymentMethod, req.AllowNextAction)
	r.c.DeclineCode, r.c.Code = code, code
	p.succeed(&r, status)
	if r.c.Status == psp.Pending && req.PaymentMethod == MethodThreeDS {
		r.c.NextAction = &psp.NextAction{Type: psp.NextActionRedirect, URL: "/3ds/" + r.c.Reference}
	}
	r.merchantID = req.MerchantID
	p.record(r)
	return r.view(), true, lost, nil
}

// succeed gives r status, where Succeeded means what the customer's money
// allows: taken at once, or for a manual charge authorized until the
// validity runs out. The caller holds mu.
func (p *PSP) succeed(r *record, status psp.ChargeStatus) {
	switch {
	case status == psp.Succeeded && r.manual:
		r.c.Status = psp.Authorized
		r.captureBefore = p.now().Add(p.validity).UTC().Truncate(time.Second)
	case status == psp.Succeeded:
		r.c.Status, r.c.AmountCaptured = psp.Succeeded, r.c.Amount
	default:
		r.c.Status = status
	}
}

// current returns records[i] after letting an authorization past its
// CaptureBefore lapse, as the card network would have by now. The caller
// holds mu.
func (p *PSP) current(i int) *record {
	r := &p.records[i]
	if r.c.Status == psp.Authorized && !p.now().Before(r.captureBefore) {
		r.c.Status, r.lapsed = psp.Voided, true
	}
	return r
}

func captureMethod(manual bool) psp.CaptureMethod {
	if manual {
		return psp.CaptureManual
	}
	return psp.CaptureAutomatic
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
	return p.current(i).view(), nil
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
// the bank would: status Succeeded (Authorized for a manual-capture charge),
// or Declined with declineCode (which is also its raw Code). It returns the
// charge as it now stands, and ErrNotPending when there is no Pending charge
// for the order id.
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
	if !ok || p.records[i].c.Status != psp.Pending {
		return psp.Charge{}, ErrNotPending
	}
	r := &p.records[i]
	r.c.DeclineCode, r.c.Code, r.c.NextAction = declineCode, declineCode, nil
	p.succeed(r, status)
	return r.view(), nil
}

// Lapse makes the authorization for merchantOrderID lapse now, as if its
// CaptureBefore had passed: it is Voided, and no Capture can take it. It
// returns the charge as it now stands, and ErrNotAuthorized when there is no
// Authorized charge for the order id.
func (p *PSP) Lapse(merchantOrderID string) (psp.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byOrder[merchantOrderID]
	if !ok || p.current(i).c.Status != psp.Authorized {
		return psp.Charge{}, ErrNotAuthorized
	}
	r := &p.records[i]
	r.c.Status, r.lapsed, r.captureBefore = psp.Voided, true, p.now().UTC()
	return r.view(), nil
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
	if !ok || p.records[i].c.Reference != req.ChargeReference {
		r.DeclineCode, r.Code = psp.RefundDeclineChargeNotFound, psp.RefundDeclineChargeNotFound
		return r, false, lost, nil
	}
	c := p.current(i).c
	if c.Currency != req.Currency {
		return psp.Refund{}, false, lost, rejected("refund",
			fmt.Errorf("%w: charge %q is in %s, refund asked in %s", ErrInvalidRequest, c.Reference, c.Currency, req.Currency))
	}
	if c.Status != psp.Succeeded {
		r.DeclineCode, r.Code = psp.RefundDeclineNotRefundable, psp.RefundDeclineNotRefundable
		return r, false, lost, nil
	}
	left := c.AmountCaptured
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
	p.recordRefund(r)
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
	if c := p.records[p.byOrder[r.MerchantOrderID]].c; c.Reference != chargeReference {
		return psp.Refund{}, psp.ErrNotFound
	}
	return r, nil
}

// Capture implements psp.Capturer; see the package documentation.
func (p *PSP) Capture(ctx context.Context, req psp.CaptureRequest) (psp.Charge, error) {
	c, _, err := p.CaptureCreated(ctx, req)
	return c, err
}

// CaptureCreated is Capture that also reports whether this call made the
// capture (false for a repeat, and for a charge answered as it stands).
func (p *PSP) CaptureCreated(ctx context.Context, req psp.CaptureRequest) (psp.Charge, bool, error) {
	p.mu.Lock()
	p.captureCalls++
	hook, after := p.captureHook, p.captureAfter
	p.mu.Unlock()
	var run func(psp.Charge)
	if after != nil {
		run = func(c psp.Charge) { after(ctx, req, c) }
	}
	if hook != nil {
		hook(ctx, req)
	}
	return p.command(ctx, "capture", func() (psp.Charge, bool, bool, error) { return p.processCapture(req) }, run)
}

// Void implements psp.Capturer; see the package documentation.
func (p *PSP) Void(ctx context.Context, req psp.VoidRequest) (psp.Charge, error) {
	c, _, err := p.VoidCreated(ctx, req)
	return c, err
}

// VoidCreated is Void that also reports whether this call voided the charge.
func (p *PSP) VoidCreated(ctx context.Context, req psp.VoidRequest) (psp.Charge, bool, error) {
	p.mu.Lock()
	p.voidCalls++
	hook, after := p.voidHook, p.voidAfter
	p.mu.Unlock()
	var run func(psp.Charge)
	if after != nil {
		run = func(c psp.Charge) { after(ctx, req, c) }
	}
	if hook != nil {
		hook(ctx, req)
	}
	return p.command(ctx, "void", func() (psp.Charge, bool, bool, error) { return p.processVoid(req) }, run)
}

// command runs the rest of a Capture or Void call once its hook has run:
// the trip to the PSP, the PSP's side (process), the after hook on an
// answer, and the answer lost to a fault or to a caller that stopped
// listening.
func (p *PSP) command(ctx context.Context, op string, process func() (psp.Charge, bool, bool, error), after func(psp.Charge)) (psp.Charge, bool, error) {
	p.mu.Lock()
	latency := p.latency
	p.mu.Unlock()
	if err := wait(ctx, latency); err != nil {
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: op, Err: err}
	}
	c, created, lost, err := process()
	if err != nil && !lost {
		return psp.Charge{}, false, err
	}
	if err == nil && after != nil {
		after(c)
	}
	if lost {
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: op, Err: injected(FaultUnknownAfterCharge)}
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return psp.Charge{}, false, &psp.Error{Class: psp.Unknown, Op: op, Err: ctxErr}
	}
	return c, created, nil
}

// faulted consumes the next fault of q for op: an error when it stops the
// call before the PSP acts, and lost when the answer is to be lost after.
func faulted(q *[]Fault, op string) (lost bool, err error) {
	switch f := next(q); f {
	case FaultNotProcessed:
		return false, &psp.Error{Class: psp.NotProcessed, Op: op, Err: injected(f)}
	case FaultUnknownBeforeCharge:
		return false, &psp.Error{Class: psp.Unknown, Op: op, Err: injected(f)}
	case FaultUnknownAfterCharge:
		return true, nil
	}
	return false, nil
}

// commanded finds the charge a capture or void names, as it stands now, or
// says why the request can never succeed. The caller holds mu.
func (p *PSP) commanded(op, kind, orderID, merchantOrderID, reference string) (*record, error) {
	if err := validOrderID(kind, orderID); err != nil {
		return nil, rejected(op, err)
	}
	if merchantOrderID == "" || reference == "" {
		return nil, rejected(op, fmt.Errorf("%w: a %s needs the charge's order id and reference", ErrInvalidRequest, kind))
	}
	i, ok := p.byOrder[merchantOrderID]
	if !ok || p.records[i].c.Reference != reference {
		return nil, rejected(op, fmt.Errorf("%w: no charge %s for order %q", ErrInvalidRequest, reference, merchantOrderID))
	}
	return p.current(i), nil
}

// processCapture is the PSP's side of a Capture, in one critical section
// like process.
func (p *PSP) processCapture(req psp.CaptureRequest) (c psp.Charge, created, lost bool, err error) {
	const op = "capture"
	p.mu.Lock()
	defer p.mu.Unlock()
	if lost, err = faulted(&p.captureFault, op); err != nil {
		return psp.Charge{}, false, false, err
	}
	r, err := p.commanded(op, "capture", req.OrderID, req.MerchantOrderID, req.ChargeReference)
	if err != nil {
		return psp.Charge{}, false, lost, err
	}
	if err := p.validAmount(req.Amount, req.Currency); err != nil {
		return psp.Charge{}, false, lost, rejected(op, err)
	}
	if i, ok := p.byCapture[req.OrderID]; ok {
		done := p.captures[i]
		if done.MerchantOrderID != req.MerchantOrderID || done.ChargeReference != req.ChargeReference ||
			done.Amount != req.Amount || done.Currency != req.Currency {
			return psp.Charge{}, false, lost, &psp.Error{Class: psp.NotProcessed, Op: op,
				Err: fmt.Errorf("%w: capture %q took %d %s of %s, now asked for %d %s of %s", ErrOrderIDReused,
					req.OrderID, done.Amount, done.Currency, done.ChargeReference, req.Amount, req.Currency, req.ChargeReference)}
		}
		return r.view(), false, lost, nil
	}
	if r.c.Currency != req.Currency || req.Amount > r.c.Amount {
		return psp.Charge{}, false, lost, rejected(op, fmt.Errorf("%w: charge %s authorized %d %s, a capture asked for %d %s",
			ErrInvalidRequest, r.c.Reference, r.c.Amount, r.c.Currency, req.Amount, req.Currency))
	}
	if r.c.Status != psp.Authorized {
		return r.view(), false, lost, nil // captured already, voided, lapsed, or never authorized
	}
	p.seq++
	r.c.Status, r.c.AmountCaptured = psp.Succeeded, req.Amount
	p.byCapture[req.OrderID] = len(p.captures)
	p.captures = append(p.captures, Capture{OrderID: req.OrderID, MerchantOrderID: req.MerchantOrderID,
		ChargeReference: req.ChargeReference, Reference: fmt.Sprintf("fake_cp_%d", p.seq), Amount: req.Amount, Currency: req.Currency})
	return r.view(), true, lost, nil
}

// processVoid is the PSP's side of a Void, in one critical section like
// process.
func (p *PSP) processVoid(req psp.VoidRequest) (c psp.Charge, created, lost bool, err error) {
	const op = "void"
	p.mu.Lock()
	defer p.mu.Unlock()
	if lost, err = faulted(&p.voidFault, op); err != nil {
		return psp.Charge{}, false, false, err
	}
	r, err := p.commanded(op, "void", req.OrderID, req.MerchantOrderID, req.ChargeReference)
	if err != nil {
		return psp.Charge{}, false, lost, err
	}
	if i, ok := p.byVoid[req.OrderID]; ok {
		if done := p.voids[i]; done.MerchantOrderID != req.MerchantOrderID || done.ChargeReference != req.ChargeReference {
			return psp.Charge{}, false, lost, &psp.Error{Class: psp.NotProcessed, Op: op,
				Err: fmt.Errorf("%w: void %q released %s, now asked for %s", ErrOrderIDReused, req.OrderID, done.ChargeReference, req.ChargeReference)}
		}
		return r.view(), false, lost, nil
	}
	if r.c.Status != psp.Authorized && (r.c.Status != psp.Pending || !r.manual) {
		return r.view(), false, lost, nil // captured, voided, lapsed, declined, or taken at once
	}
	r.c.Status, r.c.NextAction = psp.Voided, nil
	p.byVoid[req.OrderID] = len(p.voids)
	p.voids = append(p.voids, Void{OrderID: req.OrderID, MerchantOrderID: req.MerchantOrderID,
		ChargeReference: req.ChargeReference, Reason: req.Reason})
	return r.view(), true, lost, nil
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

// FailNextCaptures queues n faults of kind f for upcoming Capture calls, like
// FailNextCharges does for charges: FaultUnknownAfterCharge captures, then
// loses the answer.
func (p *PSP) FailNextCaptures(f Fault, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.captureFault = append(p.captureFault, f)
	}
}

// FailNextVoids queues n faults of kind f for upcoming Void calls.
func (p *PSP) FailNextVoids(f Fault, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.voidFault = append(p.voidFault, f)
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

// SetLatency makes every later call wait d before reaching the PSP. Zero
// removes the latency.
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

// SetCaptureHook installs h to run at the start of every Capture, before
// latency, faults and capturing, outside the PSP's lock, as SetChargeHook
// does for charges: a hook that blocks holds a capture before the PSP sees
// it, so that a test can race it against a void. nil removes the hook.
func (p *PSP) SetCaptureHook(h CaptureHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.captureHook = h
}

// SetCaptureHookAfter installs h to run once the PSP has answered a Capture
// (captured, deduplicated or answered as the charge stands) and before the
// call returns, as SetChargeHookAfter does for charges. nil removes it.
func (p *PSP) SetCaptureHookAfter(h CaptureHookAfter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.captureAfter = h
}

// SetVoidHook is SetCaptureHook for Void calls.
func (p *PSP) SetVoidHook(h VoidHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.voidHook = h
}

// SetVoidHookAfter is SetCaptureHookAfter for Void calls.
func (p *PSP) SetVoidHookAfter(h VoidHookAfter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.voidAfter = h
}

// Reset forgets every charge, refund, capture, void and call count and
// removes faults, hooks and latency, leaving the PSP as New made it.
// Reference numbers keep counting so that references stay unique over the
// PSP's life.
func (p *PSP) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = nil
	p.byOrder = make(map[string]int)
	p.refunds = nil
	p.byRefund = make(map[string]int)
	p.captures, p.voids = nil, nil
	p.byCapture, p.byVoid = make(map[string]int), make(map[string]int)
	p.chargeCalls, p.lookupCalls, p.refundCalls, p.captureCalls, p.voidCalls = 0, 0, 0, 0, 0
	p.chargeFault, p.refundFault, p.captureFault, p.voidFault, p.lookupFault = nil, nil, nil, nil, 0
	p.latency = 0
	p.hook, p.hookAfter = nil, nil
	p.captureHook, p.captureAfter, p.voidHook, p.voidAfter = nil, nil, nil, nil
	p.ledger, p.ledgerFault = nil, 0
}

// Charges returns a copy of every charge record, whatever its status, in
// creation order, as the charges stand now.
func (p *PSP) Charges() []psp.Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]psp.Charge, len(p.records))
	for i := range p.records {
		cs[i] = p.current(i).view()
	}
	return cs
}

// Authorizations returns every charge that was authorized, as it stands
// now (still Authorized, captured, voided or lapsed), in creation order.
func (p *PSP) Authorizations() []Authorization {
	p.mu.Lock()
	defer p.mu.Unlock()
	var as []Authorization
	for i := range p.records {
		if r := p.current(i); !r.captureBefore.IsZero() {
			as = append(as, Authorization{Charge: r.view(), CaptureBefore: r.captureBefore, Lapsed: r.lapsed})
		}
	}
	return as
}

// Captures returns a copy of every capture made, in creation order. A
// capture that took nothing (a repeat, a charge no longer capturable)
// leaves no record.
func (p *PSP) Captures() []Capture {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Capture(nil), p.captures...)
}

// CapturesFor is the number of captures made under the capture order id
// orderID, counted by scanning the ledger like ChargesFor.
func (p *PSP) CapturesFor(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.captures {
		if c.OrderID == orderID {
			n++
		}
	}
	return n
}

// CapturesOf is the number of captures made of the charge for
// merchantOrderID, whatever their order ids.
func (p *PSP) CapturesOf(merchantOrderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.captures {
		if c.MerchantOrderID == merchantOrderID {
			n++
		}
	}
	return n
}

// Voids returns a copy of every void made, in creation order.
func (p *PSP) Voids() []Void {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Void(nil), p.voids...)
}

// VoidsFor is the number of voids made under the void order id orderID,
// counted by scanning the ledger.
func (p *PSP) VoidsFor(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.voids {
		if v.OrderID == orderID {
			n++
		}
	}
	return n
}

// CaptureCalls is the number of Capture calls received, including refused,
// deduplicated and faulted ones.
func (p *PSP) CaptureCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.captureCalls
}

// VoidCalls is the number of Void calls received, including refused,
// deduplicated and faulted ones.
func (p *PSP) VoidCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.voidCalls
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
	for _, r := range p.records {
		if r.c.Status == psp.Succeeded {
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
	for _, r := range p.records {
		if r.c.MerchantOrderID == orderID {
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
	switch req.CaptureMethod {
	case "", psp.CaptureAutomatic, psp.CaptureManual:
	default:
		return fmt.Errorf("%w: capture method %q", ErrInvalidRequest, req.CaptureMethod)
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
