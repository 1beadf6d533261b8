package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"gateway/routing"
)

// FailedOver implements payments.Observer.
func (m *Metrics) FailedOver(from, to string) { m.failovers.WithLabelValues(from, to).Inc() }

// ExtraCharge implements reconcile.Observer.
func (m *Metrics) ExtraCharge(account string, returned bool) {
	action := "review"
	if returned {
		action = "returned"
	}
	m.extraCharges.WithLabelValues(account, action).Inc()
}

// breakerStates is gateway_psp_breaker_state{account}: each watched
// account's breaker (0 closed, 1 half open, 2 open), read at each scrape.
type breakerStates struct {
	desc     *prometheus.Desc
	mu       sync.Mutex
	accounts []string
	health   *routing.Health
}

func newBreakerStates(reg prometheus.Registerer) *breakerStates {
	b := &breakerStates{desc: prometheus.NewDesc("gateway_psp_breaker_state",
		"Each PSP account's circuit breaker in this replica: 0 closed, 1 half open (probing), 2 open (no new payment goes there).",
		[]string{"account"}, nil)}
	reg.MustRegister(b)
	return b
}

func (b *breakerStates) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *breakerStates) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.accounts {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, float64(b.health.State(a)), a)
	}
}

// WatchBreakers publishes the breakers of accounts in h, and starts each
// account's extra-charge counts at zero.
func (m *Metrics) WatchBreakers(accounts []string, h *routing.Health) {
	m.breakers.mu.Lock()
	m.breakers.accounts, m.breakers.health = accounts, h
	m.breakers.mu.Unlock()
	for _, a := range accounts {
		for _, action := range []string{"returned", "review"} {
			m.extraCharges.WithLabelValues(a, action)
		}
	}
}
