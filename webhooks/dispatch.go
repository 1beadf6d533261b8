package webhooks

import (
	"context"
	"errors"
	"fmt"
	"gateway/versions"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DispatchStore is what the dispatcher reads and writes; mysql
// implements it. Every deadline in it is judged on the database's clock.
type DispatchStore interface {
	// FanOut claims up to limit events not fanned out yet (in their order,
	// skipping those another dispatcher holds), makes one pending delivery
	// per enabled endpoint of their merchant subscribed to their type, and
	// marks them fanned out, in one transaction. It returns how many events
	// and deliveries it made.
	FanOut(ctx context.Context, limit int) (events, deliveries int, err error)
	// DueEndpoints lists up to limit endpoints with a delivery due now.
	DueEndpoints(ctx context.Context, limit int) ([]EndpointRef, error)
	// Endpoint reads one endpoint; errs.ErrNotFound once it is deleted.
	Endpoint(ctx context.Context, merchantID, id string) (Endpoint, error)
	// ClaimDeliveries takes up to limit of the endpoint's longest-waiting
	// due deliveries for lease: their tokens are bumped (the claim's is in
	// each returned Delivery) and they are not due again before the lease
	// ends. None when none is due or every due one is held by another claim.
	ClaimDeliveries(ctx context.Context, ref EndpointRef, limit int, lease time.Duration) ([]Claimed, error)
	// RecordDelivered marks the claimed delivery delivered and, with
	// endFailing, ends its endpoint's run of failures; the attempt (its
	// answer's status, its latency) goes to the delivery log in the same
	// transaction. recorded is false when the claim had lost its lease
	// (another claim's record counts, and this attempt is not logged).
	RecordDelivered(ctx context.Context, d Delivery, httpStatus int, latency time.Duration, endFailing bool) (recorded bool, err error)
	// RecordFailed records a failed attempt of the claimed delivery (see
	// Failure), in the delivery log too.
	RecordFailed(ctx context.Context, d Delivery, f Failure) (FailureOutcome, error)
	// DeliveryBacklog measures what is waiting, for metrics.
	DeliveryBacklog(ctx context.Context) (Backlog, error)
}

// Claimed is a delivery taken for an attempt, with its event and the
// database's clock at the claim.
type Claimed struct {
	Delivery Delivery
	Event    Event
	DBNow    time.Time
}

// Failure is a failed attempt: what the endpoint answered (HTTPStatus 0
// when it answered nothing) or why not, when to try again (Wait), and the
// limits: a delivery older than MaxAge has failed for good, an endpoint
// failing for DisableAfter is disabled with DisableReason.
type Failure struct {
	HTTPStatus    int
	Error         string
	Latency       time.Duration
	Wait          time.Duration
	MaxAge        time.Duration
	DisableAfter  time.Duration
	DisableReason string
}

// FailureOutcome is what a failed attempt's record did.
type FailureOutcome struct {
	// Recorded is false when the claim had lost its lease.
	Recorded bool
	// Status is the delivery's: pending (to retry) or failed.
	Status DeliveryStatus
	// Disabled says the endpoint was disabled by this record.
	Disabled bool
}

// Backlog is the deliveries' queue, as of one look.
type Backlog struct {
	// Pending deliveries, of which Due are due now.
	Pending, Due int64
	// NotFannedOut counts events not yet turned into deliveries.
	NotFannedOut int64
	// OldestUndelivered is the age of the oldest pending delivery or
	// event not fanned out (0 when none).
	OldestUndelivered time.Duration
}

// Outcome labels an attempt's result for metrics.
type Outcome string

// Attempt outcomes.
const (
	OutcomeDelivered Outcome = "delivered" // 2xx
	OutcomeRetry     Outcome = "retry"     // failed, to be tried again
	OutcomeFailed    Outcome = "failed"    // failed for good (too old, or the endpoint disabled)
	OutcomeFenced    Outcome = "fenced"    // answered, but the claim had lost its lease
)

// Observer is told what the dispatcher does, for metrics.
type Observer interface {
	DeliveryAttempted(o Outcome, d time.Duration)
	// DeliveryLag is an event's age when an endpoint first answered 2xx.
	DeliveryLag(d time.Duration)
	EndpointDisabled()
	DeliveryBacklog(b Backlog)
}

type noObserver struct{}

func (noObserver) DeliveryAttempted(Outcome, time.Duration) {}
func (noObserver) DeliveryLag(time.Duration)                {}
func (noObserver) EndpointDisabled()                        {}
func (noObserver) DeliveryBacklog(Backlog)                  {}

// Config tunes a dispatcher; zero fields take the Default* values.
type Config struct {
	// Timeout bounds one attempt; Lease (three times Timeout plus 5s when zero)
	// must outlast it.
	Timeout time.Duration
	Lease   time.Duration
	// Concurrency bounds the attempts to one endpoint in flight on this
	// dispatcher: a slow endpoint holds that many workers and no more.
	Concurrency  int
	Interval     time.Duration
	BackoffBase  time.Duration
	BackoffMax   time.Duration
	MaxAge       time.Duration
	DisableAfter time.Duration
	FanOutBatch  int
	MaxEndpoints int
	// Gate, when set, stops the dispatcher while it returns an error (this
	// replica's clock strays from the database's).
	Gate func() error
	// Now is the clock of the signatures' timestamps (time.Now when nil).
	Now func() time.Time
	// Jitter draws a fraction in [0, 1) (math/rand when nil).
	Jitter   func() float64
	Logger   *slog.Logger
	Observer Observer
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.Timeout, DefaultTimeout)
	set(&c.Lease, 3*c.Timeout+5*time.Second)
	set(&c.Interval, DefaultInterval)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	set(&c.MaxAge, DefaultMaxAge)
	set(&c.DisableAfter, DefaultDisableAfter)
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.FanOutBatch <= 0 {
		c.FanOutBatch = DefaultFanOutBatch
	}
	if c.MaxEndpoints <= 0 {
		c.MaxEndpoints = DefaultMaxEndpoints
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
}

// Dispatcher delivers events to endpoints. Every replica runs one: claims
// use SKIP LOCKED and a lease with a fencing token on the database's clock,
// so dispatchers never attempt the same delivery at once, and one that dies
// mid-attempt leaves its delivery due again once the lease ends (the
// receiver then gets it again, with the same event id: delivery is at
// least once).
//
// Each endpoint with due deliveries gets a runner of its own with
// Concurrency workers, which attempt that endpoint's deliveries until none
// is due: an endpoint that answers slowly occupies its own workers only,
// never another endpoint's.
type Dispatcher struct {
	st     DispatchStore
	cipher *Cipher
	client *http.Client
	cfg    Config
	log    *slog.Logger

	// measured is when the backlog gauges were last measured (looks run
	// one at a time).
	measured time.Time

	mu     sync.Mutex
	active map[EndpointRef]bool
	wg     sync.WaitGroup
	wake   chan struct{}
}

// NewDispatcher returns a dispatcher over st, decrypting secrets with c and
// connecting through g.
func NewDispatcher(st DispatchStore, c *Cipher, g *Guard, cfg Config) *Dispatcher {
	cfg.defaults()
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would connect where the guard cannot look
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   cfg.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	client := &http.Client{
		Transport: transport,
		// A redirect is a failed attempt: an endpoint is the URL registered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Dispatcher{st: st, cipher: c, client: client, cfg: cfg, log: cfg.Logger,
		active: map[EndpointRef]bool{}, wake: make(chan struct{}, 1)}
}

// Run dispatches until ctx ends, then waits for the attempts in flight
// (their context ends with ctx: an attempt cut short is recorded by nobody
// and is made again once its lease ends).
func (d *Dispatcher) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	defer d.wg.Wait()
	for {
		if err := d.look(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("webhook dispatch failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// RunOnce fans out every waiting event and attempts every delivery due,
// returning once none is left due (deliveries scheduled for later stay).
func (d *Dispatcher) RunOnce(ctx context.Context) error {
	for {
		refs, err := d.lookRefs(ctx)
		if err != nil {
			return err
		}
		d.wg.Wait()
		if len(refs) == 0 || ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// look fans out and starts workers for the endpoints with due deliveries.
func (d *Dispatcher) look(ctx context.Context) error {
	_, err := d.lookRefs(ctx)
	return err
}

func (d *Dispatcher) lookRefs(ctx context.Context) ([]EndpointRef, error) {
	if d.cfg.Gate != nil {
		if err := d.cfg.Gate(); err != nil {
			return nil, err
		}
	}
	for {
		n, _, err := d.st.FanOut(ctx, d.cfg.FanOutBatch)
		if err != nil {
			return nil, err
		}
		if n < d.cfg.FanOutBatch {
			break
		}
	}
	refs, err := d.st.DueEndpoints(ctx, d.cfg.MaxEndpoints)
	if err != nil {
		return nil, err
	}
	for _, ref := range refs {
		d.start(ctx, ref)
	}
	if time.Since(d.measured) >= backlogEvery {
		// Scans of the whole queue: not at every look.
		d.measured = time.Now()
		if b, err := d.st.DeliveryBacklog(ctx); err == nil {
			d.cfg.Observer.DeliveryBacklog(b)
		}
	}
	return refs, nil
}

// start runs the endpoint's runner unless it runs already.
func (d *Dispatcher) start(ctx context.Context, ref EndpointRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active[ref] {
		return
	}
	d.active[ref] = true
	d.wg.Add(1)
	go d.run(ctx, ref)
}

// claimed is a claimed delivery and when this process claimed it.
type claimed struct {
	Claimed
	at time.Time
}

// run is one endpoint's runner: Concurrency workers attempt deliveries
// from a queue of at most twice Concurrency claimed ones, which the runner
// refills in batches (one claim transaction for several deliveries) once
// it is half empty, until the endpoint has none due. A queued delivery
// starts within two attempts' time of its claim when the database keeps
// up, so the lease (three times the timeout plus a margin) outlasts its
// wait and its attempt; when it does not (records or the endpoint's read
// held up behind a slow database), a delivery whose lease has less than
// one attempt's time left is not attempted (fresh): its lease runs out and
// a later claim takes it, so that two attempts of it never run at once.
func (d *Dispatcher) run(ctx context.Context, ref EndpointRef) {
	n := d.cfg.Concurrency
	queue := make(chan claimed, 2*n)
	took := make(chan struct{}, n)
	ep := &endpointCache{d: d, ref: ref}
	// Records run beside the next POSTs, at most n at a time: a slow
	// database slows the workers down rather than piling records up.
	var records sync.WaitGroup
	recordSlots := make(chan struct{}, n)
	later := func(record func()) {
		recordSlots <- struct{}{}
		records.Add(1)
		go func() {
			defer func() { <-recordSlots; records.Done() }()
			record()
		}()
	}
	var workers sync.WaitGroup
	for range n {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for c := range queue {
				select {
				case took <- struct{}{}:
				default:
				}
				e, err := ep.get(ctx)
				if err != nil {
					continue // deleted meanwhile, or the database is away: the lease runs out
				}
				if !d.fresh(c) {
					continue
				}
				if delivered := d.attempt(ctx, e, c, later); !delivered || !e.FailingSince.IsZero() {
					ep.forget() // the endpoint's run of failures began or ended: read it again
				}
			}
		}()
	}
	defer func() {
		close(queue)
		workers.Wait()
		records.Wait()
		d.mu.Lock()
		delete(d.active, ref)
		d.mu.Unlock()
		d.wg.Done()
	}()
	for ctx.Err() == nil {
		if room := cap(queue) - len(queue); room < n {
			select { // refill once half empty, so that claims come in batches
			case <-took:
				continue
			case <-ctx.Done():
				return
			}
		}
		if d.cfg.Gate != nil && d.cfg.Gate() != nil {
			return
		}
		asked := d.cfg.Now() // the lease begins later, on the database's clock
		cs, err := d.st.ClaimDeliveries(ctx, ref, cap(queue)-len(queue), d.cfg.Lease)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook claim failed", "endpoint", ref.ID, "err", err)
			}
			return
		}
		if len(cs) == 0 {
			return
		}
		for _, c := range cs {
			queue <- claimed{Claimed: c, at: asked} // room was made for them
		}
	}
}

// fresh says the claim's lease still outlasts an attempt: it was asked
// for less than Lease − Timeout ago by this process's clock, which the
// lease, begun on the database's clock after the asking, outlasts.
func (d *Dispatcher) fresh(c claimed) bool {
	return d.cfg.Now().Sub(c.at) < d.cfg.Lease-d.cfg.Timeout
}

// endpointCache is a runner's copy of its endpoint, read again at most
// every Interval: a rotation, a disabling or a deletion shows within that time.
type endpointCache struct {
	d      *Dispatcher
	ref    EndpointRef
	mu     sync.Mutex
	ep     Endpoint
	readAt time.Time
}

func (c *endpointCache) get(ctx context.Context) (Endpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < c.d.cfg.Interval {
		return c.ep, nil
	}
	ep, err := c.d.st.Endpoint(ctx, c.ref.MerchantID, c.ref.ID)
	if err != nil {
		return Endpoint{}, err
	}
	c.ep, c.readAt = ep, time.Now()
	return ep, nil
}

func (c *endpointCache) forget() {
	c.mu.Lock()
	c.readAt = time.Time{}
	c.mu.Unlock()
}

// attempt POSTs one claimed delivery to ep and has later record what
// happened (so that the worker's next POST need not wait for the database);
// it reports whether the endpoint answered 2xx.
func (d *Dispatcher) attempt(ctx context.Context, ep Endpoint, c claimed, later func(func())) (delivered bool) {
	claimedAt := c.at
	del := c.Delivery
	start := time.Now()
	status, sendErr := d.send(ctx, ep, c.Claimed)
	if ctx.Err() != nil {
		return false // stopping: nobody records; the delivery is due again after its lease
	}
	elapsed := time.Since(start)
	if sendErr == nil && status >= 200 && status < 300 {
		later(func() {
			recorded, err := d.st.RecordDelivered(ctx, del, status, elapsed, !ep.FailingSince.IsZero())
			switch {
			case err != nil:
				d.log.Warn("webhook delivery not recorded", "delivery", del.ID, "err", err)
			case !recorded:
				d.cfg.Observer.DeliveryAttempted(OutcomeFenced, elapsed)
			default:
				d.cfg.Observer.DeliveryAttempted(OutcomeDelivered, elapsed)
				if del.FirstDeliveredAt.IsZero() {
					d.cfg.Observer.DeliveryLag(c.DBNow.Add(d.cfg.Now().Sub(claimedAt)).Sub(c.Event.CreatedAt))
				}
			}
		})
		return true
	}
	f := Failure{
		HTTPStatus: status, Latency: elapsed, Wait: d.backoff(del.Attempts + 1), MaxAge: d.cfg.MaxAge, DisableAfter: d.cfg.DisableAfter,
		DisableReason: fmt.Sprintf("failing continuously for %s", d.cfg.DisableAfter),
	}
	if sendErr != nil {
		f.Error = sendErr.Error()
	} else {
		f.Error = fmt.Sprintf("answered %d", status)
	}
	later(func() {
		out, err := d.st.RecordFailed(ctx, del, f)
		switch {
		case err != nil:
			d.log.Warn("webhook failure not recorded", "delivery", del.ID, "err", err)
		case !out.Recorded:
			d.cfg.Observer.DeliveryAttempted(OutcomeFenced, elapsed)
		case out.Status == Failed:
			d.cfg.Observer.DeliveryAttempted(OutcomeFailed, elapsed)
		default:
			d.cfg.Observer.DeliveryAttempted(OutcomeRetry, elapsed)
		}
		if out.Disabled {
			d.cfg.Observer.EndpointDisabled()
			d.log.Warn("webhook endpoint disabled", "endpoint", ep.ID, "merchant", ep.MerchantID,
				"reason", f.DisableReason, "audit", true)
		}
	})
	return false
}

// backoff is the wait after the n-th failed attempt: BackoffBase doubled
// per attempt up to BackoffMax, drawn between its half and its whole.
func (d *Dispatcher) backoff(n int) time.Duration {
	w := d.cfg.BackoffBase
	for i := 1; i < n && w < d.cfg.BackoffMax; i++ {
		w *= 2
	}
	w = min(w, d.cfg.BackoffMax)
	return w/2 + time.Duration(d.cfg.Jitter()*float64(w/2))
}

// backlogEvery is how often a dispatcher measures the queue for its gauges.
const backlogEvery = 5 * time.Second

// maxAnswer is how much of an endpoint's answer is read (and thrown away).
const maxAnswer = 64 << 10

// send POSTs the event, signed with every secret valid now, and returns the
// answer's status. An error never carries a secret, nor the URL (which may
// hold the merchant's own credentials in its query).
func (d *Dispatcher) send(ctx context.Context, ep Endpoint, c Claimed) (int, error) {
	v := versions.OrFirst(ep.APIVersion)
	body, err := Body(c.Event, v)
	if err != nil {
		return 0, errors.New("render event: " + err.Error())
	}
	secrets, err := d.secrets(ep, c.DBNow)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, strings.NewReader(string(body)))
	if err != nil {
		return 0, errors.New("invalid endpoint URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gateway-webhooks/1")
	req.Header.Set(EventIDHeader, c.Event.ID)
	req.Header.Set(versions.Header, string(v))
	req.Header.Set(SignatureHeader, SignatureValue(secrets, d.cfg.Now(), body))
	res, err := d.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer within %s", d.cfg.Timeout)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswer))
	_ = res.Body.Close()
	return res.StatusCode, nil
}

// secrets decrypts the endpoint's current secret and, while its grace
// lasts (on the database's clock), the one a rotation replaced.
func (d *Dispatcher) secrets(ep Endpoint, dbNow time.Time) ([]string, error) {
	cur, err := d.cipher.Open(ep.ID, ep.SecretEnc)
	if err != nil {
		return nil, err
	}
	out := []string{cur}
	if len(ep.PrevSecretEnc) > 0 && ep.PrevSecretUntil.After(dbNow) {
		prev, err := d.cipher.Open(ep.ID, ep.PrevSecretEnc)
		if err != nil {
			return nil, err
		}
		out = append(out, prev)
	}
	return out, nil
}

// Wake asks the dispatcher to look for due work now.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}
