package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"gateway/webhooks"
)

// Webhooks holds the webhook dispatcher's collectors.
type Webhooks struct {
	attempts     *prometheus.CounterVec
	attemptTime  prometheus.Histogram
	lag          prometheus.Histogram
	disabled     prometheus.Counter
	pending      prometheus.Gauge
	due          prometheus.Gauge
	notFannedOut prometheus.Gauge
	oldest       prometheus.Gauge
	lastLook     prometheus.Gauge
}

var _ webhooks.Observer = (*Webhooks)(nil)

// NewWebhooks creates the dispatcher's collectors and registers them with reg.
func NewWebhooks(reg prometheus.Registerer) *Webhooks {
	f := promauto{reg}
	return &Webhooks{
		attempts: f.counterVec("gateway_webhook_deliveries_total",
			"Webhook delivery attempts by outcome: delivered (2xx), retry (failed, to be tried again), failed (for good), fenced (the claim had lost its lease).", "outcome"),
		attemptTime: f.histogram("gateway_webhook_attempt_duration_seconds", "How long an endpoint took to answer an attempt.",
			[]float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		// From seconds (the usual) to the 3 days of retries.
		lag: f.histogram("gateway_webhook_delivery_lag_seconds",
			"Time from an event's creation to its endpoint's first 2xx.",
			[]float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 72 * 3600}),
		disabled: f.counter("gateway_webhook_endpoints_disabled_total",
			"Endpoints the dispatcher disabled after they failed continuously for the configured time."),
		pending: f.gauge("gateway_webhook_queue_depth", "Pending webhook deliveries, as of the dispatcher's last look."),
		due:     f.gauge("gateway_webhook_queue_due", "Pending webhook deliveries due now, as of the dispatcher's last look."),
		notFannedOut: f.gauge("gateway_webhook_events_not_fanned_out",
			"Events not yet turned into deliveries, as of the dispatcher's last look."),
		oldest: f.gauge("gateway_webhook_oldest_undelivered_seconds",
			"Age of the oldest pending delivery or event not fanned out, as of the dispatcher's last look (0 when none)."),
		lastLook: f.gauge("gateway_webhook_last_look_timestamp_seconds",
			"Unix time of the dispatcher's last look at its queue; alert when it stops moving."),
	}
}

// DeliveryAttempted implements webhooks.Observer.
func (m *Webhooks) DeliveryAttempted(o webhooks.Outcome, d time.Duration) {
	m.attempts.WithLabelValues(string(o)).Inc()
	m.attemptTime.Observe(d.Seconds())
}

// DeliveryLag implements webhooks.Observer.
func (m *Webhooks) DeliveryLag(d time.Duration) { m.lag.Observe(max(d, 0).Seconds()) }

// EndpointDisabled implements webhooks.Observer.
func (m *Webhooks) EndpointDisabled() { m.disabled.Inc() }

// DeliveryBacklog implements webhooks.Observer.
func (m *Webhooks) DeliveryBacklog(b webhooks.Backlog) {
	m.pending.Set(float64(b.Pending))
	m.due.Set(float64(b.Due))
	m.notFannedOut.Set(float64(b.NotFannedOut))
	m.oldest.Set(b.OldestUndelivered.Seconds())
	m.lastLook.SetToCurrentTime()
}
