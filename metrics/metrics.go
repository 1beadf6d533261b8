// Package metrics owns the gateway's Prometheus metrics: HTTP traffic,
// idempotency outcomes, PSP calls by outcome class, and the reconciler's
// work. Collectors live on a Metrics value registered with a registry passed
// in; nothing is global.
package metrics

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gateway/notices"
	"gateway/payments"
	"gateway/psp"
	"gateway/reconcile"
)

// Metrics holds every collector.
type Metrics struct {
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	keyOutcomes   *prometheus.CounterVec
	inFlightWait  prometheus.Histogram
	takeovers     prometheus.Counter
	fencing       prometheus.Counter
	missingKey    prometheus.Counter
	rateLimited   prometheus.Counter
	pspCalls      *prometheus.CounterVec
	pspDuration   *prometheus.HistogramVec
	settlements   *prometheus.CounterVec
	needsReview   prometheus.Gauge
	refundsReview prometheus.Gauge
	// oldestRefundReview is the age of the oldest refund in review.
	oldestRefundReview prometheus.Gauge
	oldestPending      prometheus.Gauge
	purged             prometheus.Counter
	passes             prometheus.Counter
	lastPass           prometheus.Gauge
	quarantined        prometheus.Gauge
	oldestReview       prometheus.Gauge
	unconfigured       prometheus.Counter
	clockSkew          prometheus.Gauge
	payments           *prometheus.CounterVec
	refunds            *prometheus.CounterVec
	contradictions     *prometheus.CounterVec
	failovers          *prometheus.CounterVec
	extraCharges       *prometheus.CounterVec
	breakers           *breakerStates
	booksFound         *prometheus.CounterVec
	booksOpen          *prometheus.GaugeVec
	booksLastRun       *prometheus.GaugeVec
}

var (
	_ payments.Observer  = (*Metrics)(nil)
	_ notices.Observer   = (*Metrics)(nil)
	_ reconcile.Observer = (*Metrics)(nil)
)

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto{reg}
	m := &Metrics{
		httpRequests: f.counterVec("gateway_http_requests_total", "HTTP requests by route, method and status.", "route", "method", "status"),
		// Up to a minute: a create may wait for the PSP, a lookup and a duplicate in flight.
		httpDuration: f.histogramVec("gateway_http_request_duration_seconds", "HTTP request latency by route and method.",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60}, "route", "method"),
		keyOutcomes: f.counterVec("gateway_idempotency_requests_total",
			"Create requests by what their idempotency key did: fresh, replayed, mismatch (422), in_flight (409), key_reused (409 after purge).", "outcome"),
		inFlightWait: f.histogram("gateway_idempotency_inflight_wait_seconds",
			"How long duplicates waited for the first request with their key.", []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 5}),
		takeovers:   f.counter("gateway_idempotency_lease_takeovers_total", "Expired leases taken over by a retry."),
		fencing:     f.counter("gateway_idempotency_fencing_refusals_total", "Writes refused because the writer had lost its lease."),
		missingKey:  f.counter("gateway_idempotency_missing_key_total", "Mutating requests refused for lack of an Idempotency-Key."),
		rateLimited: f.counter("gateway_rate_limited_total", "Requests refused with 429."),
		pspCalls: f.counterVec("gateway_psp_calls_total",
			"PSP calls by adapter, operation and outcome class (result, not_found, not_processed, unknown).", "adapter", "op", "outcome"),
		pspDuration: f.histogramVec("gateway_psp_call_duration_seconds", "PSP call latency by adapter and operation.",
			[]float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "adapter", "op"),
		settlements: f.counterVec("gateway_reconcile_settlements_total", "Keys the reconciler handled, by outcome.", "outcome"),
		needsReview: f.gauge("gateway_payments_requires_review", "Payments waiting for a person, as of the last reconcile pass."),
		oldestPending: f.gauge("gateway_idempotency_oldest_in_progress_seconds",
			"Age of the oldest unfinished key, as of the last reconcile pass (0 when none)."),
		purged: f.counter("gateway_idempotency_purged_total", "Completed keys deleted after retention."),
		passes: f.counter("gateway_reconcile_passes_total", "Reconciler passes completed."),
		lastPass: f.gauge("gateway_reconcile_last_pass_timestamp_seconds",
			"Unix time of the last completed reconciler pass; alert when it stops moving."),
		quarantined: f.gauge("gateway_idempotency_quarantined",
			"Unfinished keys set aside because their rows cannot be read, as of the last reconcile pass."),
		oldestReview: f.gauge("gateway_payments_review_oldest_seconds",
			"How long the oldest payment in requires_review has waited, as of the last reconcile pass (0 when none)."),
		refundsReview: f.gauge("gateway_refunds_requires_review", "Refunds waiting for a person, as of the last reconcile pass."),
		oldestRefundReview: f.gauge("gateway_refunds_review_oldest_seconds",
			"How long the oldest refund in requires_review has waited, as of the last reconcile pass (0 when none)."),
		unconfigured: f.counter("gateway_payments_unconfigured_psp_total",
			"Requests that could not resume a payment because its PSP is not configured on this replica."),
		clockSkew: f.gauge("gateway_clock_skew_seconds",
			"This replica's clock minus the database's, as last measured."),
		payments: f.counterVec("gateway_payments_total",
			"Payments the request flow recorded final or in review, by status and decline code (none, a shared code, or other).",
			"status", "decline_code"),
		refunds: f.counterVec("gateway_refunds_total", "Refunds the request flow recorded final or in review, by status.", "status"),
		contradictions: f.counterVec("gateway_psp_contradictions_total",
			"PSP reports (notifications) that contradict a settled payment or refund, by object and what was done: review (sent to requires_review) or none (no money moves back).",
			"object", "action"),
		failovers: f.counterVec("gateway_psp_failovers_total",
			"Payments whose attempt at one account certainly did nothing and whose next attempt went to another, by account from and to.", "from", "to"),
		extraCharges: f.counterVec("gateway_psp_extra_charges_total",
			"Earlier attempts an account charged although it answered not processed, by account and what was done: returned (refunded or voided there, the payment in review) or review (the only charge: the payment in review). Alert on any.",
			"account", "action"),
		breakers: newBreakerStates(reg),
		booksFound: f.counterVec("gateway_books_discrepancies_total",
			"Discrepancies the books found between an account's PSP ledger and the gateway's records, by account and class (orphan_charge, orphan_refund, missing_at_psp, mismatch); each is counted once, however often its period is rerun.",
			"account", "class"),
		booksOpen: f.gaugeVec("gateway_books_open_discrepancies",
			"Discrepancies no operator has resolved yet, by account and class, as the books' last scheduled tick read them.", "account", "class"),
		booksLastRun: f.gaugeVec("gateway_books_last_complete_run_timestamp_seconds",
			"When the last complete books run of each account finished (Unix time): alert when it is more than a day old.", "account"),
	}
	m.preinit()
	return m
}

// declineNone and declineOther are the decline_code of a payment without a
// decline code and of one whose code is not in declineCodes.
const (
	declineNone  = "none"
	declineOther = "other"
)

// declineCodes are the decline codes with a label value of their own: the
// shared vocabulary of the PSP adapters and the gateway's own. A PSP's raw
// code becomes "other", so no PSP can grow the series.
var declineCodes = []string{psp.DeclineCardDeclined, psp.DeclineInsufficientFunds, psp.DeclineInvalidPaymentMethod,
	payments.DeclineNotProcessed, payments.DeclineRejected, payments.DeclineExpired}

func declineLabel(code string) string {
	switch {
	case code == "":
		return declineNone
	case slices.Contains(declineCodes, code):
		return code
	}
	return declineOther
}

// preinit creates every series an alert or a dashboard counts, at zero, so
// that increase() and rate() count the first event of each.
func (m *Metrics) preinit() {
	for _, o := range payments.KeyOutcomes {
		m.keyOutcomes.WithLabelValues(string(o))
	}
	for _, k := range []payments.Kind{payments.KindPayment, payments.KindRefund} {
		for _, action := range []string{"review", "none"} {
			m.contradictions.WithLabelValues(string(k), action)
		}
	}
	for _, o := range reconcile.Outcomes {
		m.settlements.WithLabelValues(string(o))
	}
	m.payments.WithLabelValues(string(payments.Succeeded), declineNone)
	for _, code := range append([]string{declineOther}, declineCodes...) {
		m.payments.WithLabelValues(string(payments.Declined), code)
	}
	for _, code := range []string{declineNone, payments.DeclineNotProcessed, payments.DeclineRejected} {
		m.payments.WithLabelValues(string(payments.Failed), code)
	}
	m.payments.WithLabelValues(string(payments.Canceled), payments.DeclineExpired)
	m.payments.WithLabelValues(string(payments.RequiresReview), declineNone)
	for _, st := range []payments.RefundStatus{payments.RefundSucceeded, payments.RefundFailed, payments.RefundRequiresReview} {
		m.refunds.WithLabelValues(string(st))
	}
}

// PaymentRecorded implements payments.Observer.
func (m *Metrics) PaymentRecorded(status payments.Status, declineCode string) {
	m.payments.WithLabelValues(string(status), declineLabel(declineCode)).Inc()
}

// RefundRecorded implements payments.Observer.
func (m *Metrics) RefundRecorded(status payments.RefundStatus) {
	m.refunds.WithLabelValues(string(status)).Inc()
}

// RegisterBuildInfo registers gateway_build_info{version,revision,goversion},
// always 1: which release each replica runs, joinable to any other series.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gateway_build_info",
		Help:        "The build this process runs: its version, VCS revision and Go version; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// Handler serves the metrics of g in the Prometheus text format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// ObserveHTTP records one request.
func (m *Metrics) ObserveHTTP(route, method string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
}

// PreinitHTTP creates a request series at zero.
func (m *Metrics) PreinitHTTP(route, method string, status int) {
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status))
}

// MissingKey counts a mutating request without an Idempotency-Key.
func (m *Metrics) MissingKey() { m.missingKey.Inc() }

// RateLimited counts a 429.
func (m *Metrics) RateLimited() { m.rateLimited.Inc() }

// KeyOutcome implements payments.Observer.
func (m *Metrics) KeyOutcome(outcome payments.KeyOutcome) {
	m.keyOutcomes.WithLabelValues(string(outcome)).Inc()
}

// InFlightWaited implements payments.Observer.
func (m *Metrics) InFlightWaited(d time.Duration) { m.inFlightWait.Observe(d.Seconds()) }

// LeaseTakenOver implements payments.Observer.
func (m *Metrics) LeaseTakenOver() { m.takeovers.Inc() }

// FencingRefused implements payments.Observer.
func (m *Metrics) FencingRefused() { m.fencing.Inc() }

// Settled implements reconcile.Observer.
func (m *Metrics) Settled(o reconcile.Outcome) { m.settlements.WithLabelValues(string(o)).Inc() }

// Purged implements reconcile.Observer.
func (m *Metrics) Purged(n int64) { m.purged.Add(float64(n)) }

// UnconfiguredPSP implements payments.Observer.
func (m *Metrics) UnconfiguredPSP() { m.unconfigured.Inc() }

// PassDone implements reconcile.Observer.
func (m *Metrics) PassDone(b payments.Backlog) {
	m.needsReview.Set(float64(b.NeedsReview))
	m.oldestPending.Set(b.OldestUnfinished.Seconds())
	m.quarantined.Set(float64(b.Quarantined))
	m.oldestReview.Set(b.OldestReview.Seconds())
	m.refundsReview.Set(float64(b.RefundsNeedReview))
	m.oldestRefundReview.Set(b.OldestRefundReview.Seconds())
	m.passes.Inc()
	m.lastPass.SetToCurrentTime()
}

// Contradicted implements notices.Observer.
func (m *Metrics) Contradicted(kind payments.Kind, review bool) {
	action := "none"
	if review {
		action = "review"
	}
	m.contradictions.WithLabelValues(string(kind), action).Inc()
}

// ClockSkew records this replica's clock minus the database's.
func (m *Metrics) ClockSkew(d time.Duration) { m.clockSkew.Set(d.Seconds()) }

// PSPCall records one PSP call.
func (m *Metrics) PSPCall(adapter, op, outcome string, d time.Duration) {
	m.pspCalls.WithLabelValues(adapter, op, outcome).Inc()
	m.pspDuration.WithLabelValues(adapter, op).Observe(d.Seconds())
}

// promauto creates and registers collectors, panicking on a duplicate name:
// that is a programming error caught by any test that builds the gateway.
type promauto struct{ reg prometheus.Registerer }

func (p promauto) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	p.reg.MustRegister(c)
	return c
}

func (p promauto) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	p.reg.MustRegister(c)
	return c
}

func (p promauto) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	p.reg.MustRegister(g)
	return g
}

func (p promauto) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	p.reg.MustRegister(g)
	return g
}

func (p promauto) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	p.reg.MustRegister(h)
	return h
}

func (p promauto) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	p.reg.MustRegister(h)
	return h
}
