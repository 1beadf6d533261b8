package metrics

import (
	"gateway/books"
)

// BooksFound counts a discrepancy the books recorded.
func (m *Metrics) BooksFound(d books.Discrepancy) {
	m.booksFound.WithLabelValues(d.Account, string(d.Class)).Inc()
}

// BooksAccounts creates the books' series of accounts at zero, so that
// increase() counts their first discrepancy and an account never run shows.
func (m *Metrics) BooksAccounts(accounts []string) {
	for _, a := range accounts {
		for _, c := range books.Classes {
			m.booksFound.WithLabelValues(a, string(c))
			m.booksOpen.WithLabelValues(a, string(c))
		}
	}
}

// BooksStanding sets the books' gauges from what the books say now.
func (m *Metrics) BooksStanding(st books.Standing) {
	m.booksOpen.Reset()
	set := func(account string) {
		for _, c := range books.Classes {
			m.booksOpen.WithLabelValues(account, string(c)).Set(float64(st.Open[account][c]))
		}
	}
	for account := range st.Open {
		set(account)
	}
	for account, at := range st.LastComplete {
		set(account)
		m.booksLastRun.WithLabelValues(account).Set(float64(at.Unix()))
	}
}
