package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/routing"
)

// The routes scenario (10): what a route of two PSP accounts costs fresh
// payments (design §16). Each round makes fresh payments with 64 clients
// through a gateway with one account (the fake alone, no route or breaker:
// serve with GATEWAY_PSP only), then through the same gateway whose default
// route splits new payments 1:1 (a hash of the key) between fake_a and
// fake_b, two separate fakes, each watched by its breaker
// (routing.DefaultBreaker). Goal: >= 0.95 x the one account's throughput.
//
// It also shows that choosing the account costs no database round trip.
// Before each phase's first request and after its last answer, the bench
// takes every connection of that gateway's pool (opening those missing, so
// that the phase opens none) and reads each one's own session counters on
// the server (information_schema.SESSION_STATUS: Questions, and the Com_
// counters of each kind): what the gateway's sessions received in
// between, less those reads, over every answer of the phase (warm-up
// included), is its statements per payment, immune to the server's other
// clients. The API key lookups of the auth cache (2 s TTL; at each lapse,
// one per request then in flight) are counted apart and left out: they
// come in bursts of chance size, the same for both gateways. Over all rounds, the two accounts' phases may issue at most
// routesStatementSlack statements per payment more than the one account's.
//
// After every phase the fakes' ledgers must hold exactly one charge per 201
// answered, from as many Charge calls, each in the ledger of the account
// its payment names in the database; with two accounts each ledger must
// hold about half (routesShareTolerance).
const (
	routesClients        = 64
	routesGoal           = 0.95
	routesStatementSlack = 0.05
)

// unitStatements marks a row whose figures are statements per payment.
const unitStatements = "stmts/payment"

// routesShareTolerance is how far from 1/2 one of two accounts' share of n
// charges may be: 5 standard deviations of a fair split (0.5/√n each), and
// never less than 0.05.
func routesShareTolerance(n int) float64 {
	if n <= 0 {
		return 0.5
	}
	return max(0.05, 2.5/math.Sqrt(float64(n)))
}

// statementCounts are a server session's counters of the statements it
// received (its Questions, and its Com_ counters of each kind).
type statementCounts struct {
	Questions, Begin, Commit, Rollback, Select, Insert, Update, Delete int64
}

func (c *statementCounts) add(o statementCounts) {
	c.Questions += o.Questions
	c.Begin += o.Begin
	c.Commit += o.Commit
	c.Rollback += o.Rollback
	c.Select += o.Select
	c.Insert += o.Insert
	c.Update += o.Update
	c.Delete += o.Delete
}

func (c statementCounts) minus(o statementCounts) statementCounts {
	return statementCounts{Questions: c.Questions - o.Questions, Begin: c.Begin - o.Begin, Commit: c.Commit - o.Commit,
		Rollback: c.Rollback - o.Rollback, Select: c.Select - o.Select, Insert: c.Insert - o.Insert,
		Update: c.Update - o.Update, Delete: c.Delete - o.Delete}
}

// sessionCounts reads conn's own session counters, by the server's id of
// the session: one SELECT, which the counters include.
func sessionCounts(ctx context.Context, conn *sqlx.Conn) (int64, statementCounts, error) {
	rows, err := conn.QueryContext(ctx, `SELECT CONNECTION_ID(), VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.SESSION_STATUS
WHERE VARIABLE_NAME IN ('QUESTIONS', 'COM_BEGIN', 'COM_COMMIT', 'COM_ROLLBACK', 'COM_SELECT', 'COM_INSERT', 'COM_UPDATE', 'COM_DELETE')`)
	if err != nil {
		return 0, statementCounts{}, fmt.Errorf("session counters: %w", err)
	}
	defer rows.Close()
	var id int64
	var c statementCounts
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&id, &name, &value); err != nil {
			return 0, c, err
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return 0, c, fmt.Errorf("session counter %s = %q: %w", name, value, err)
		}
		switch strings.ToUpper(name) {
		case "QUESTIONS":
			c.Questions = n
		case "COM_BEGIN":
			c.Begin = n
		case "COM_COMMIT":
			c.Commit = n
		case "COM_ROLLBACK":
			c.Rollback = n
		case "COM_SELECT":
			c.Select = n
		case "COM_INSERT":
			c.Insert = n
		case "COM_UPDATE":
			c.Update = n
		case "COM_DELETE":
			c.Delete = n
		}
	}
	return id, c, rows.Err()
}

// poolCounts takes every connection of db's pool (poolOptions' MaxOpen;
// opening those it lacks, so that a phase that follows opens none), reads
// each one's session counters and gives them back idle. By session id.
func poolCounts(ctx context.Context, db *sqlx.DB) (map[int64]statementCounts, error) {
	conns := make([]*sqlx.Conn, 0, poolOptions().MaxOpen)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	out := make(map[int64]statementCounts, cap(conns))
	for range cap(conns) {
		c, err := db.Connx(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		id, n, err := sessionCounts(ctx, c)
		if err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, nil
}

// poolStatements are the statements a pool's sessions received between
// two poolCounts, less those that read the counters. A session the pool
// opened between them counts whole; one it closed, only up to before.
func poolStatements(before, after map[int64]statementCounts) (sum statementCounts, opened, closed int) {
	for id, a := range after {
		b, ok := before[id]
		if !ok {
			opened++
		}
		d := a.minus(b)
		d.Questions-- // the SELECT that read after
		d.Select--
		sum.add(d)
	}
	for id := range before {
		if _, ok := after[id]; !ok {
			closed++
		}
	}
	return sum, opened, closed
}

// statementMix is statements per payment, in all and by kind.
type statementMix struct {
	All      float64 `json:"all"`
	Begin    float64 `json:"begin"`
	Commit   float64 `json:"commit"`
	Rollback float64 `json:"rollback"`
	Select   float64 `json:"select"`
	Insert   float64 `json:"insert"`
	Update   float64 `json:"update"`
	Delete   float64 `json:"delete"`
}

// perPayment is statements c over n payments.
func perPayment(c statementCounts, n int64) statementMix {
	if n <= 0 {
		return statementMix{}
	}
	d := func(v int64) float64 { return float64(v) / float64(n) }
	return statementMix{All: d(c.Questions), Begin: d(c.Begin), Commit: d(c.Commit), Rollback: d(c.Rollback),
		Select: d(c.Select), Insert: d(c.Insert), Update: d(c.Update), Delete: d(c.Delete)}
}

func (m statementMix) String() string {
	s := fmt.Sprintf("%.2f statements each (BEGIN %.2f, COMMIT %.2f, SELECT %.2f, INSERT %.2f, UPDATE %.2f",
		m.All, m.Begin, m.Commit, m.Select, m.Insert, m.Update)
	if m.Rollback != 0 || m.Delete != 0 {
		s += fmt.Sprintf(", ROLLBACK %.2f, DELETE %.2f", m.Rollback, m.Delete)
	}
	return s + ")"
}

// accountCharges is what one account's fake and the database hold after a phase.
type accountCharges struct {
	Account     string `json:"account"`
	Ledger      int    `json:"ledger_charges"`
	Succeeded   int    `json:"ledger_succeeded"`
	ChargeCalls int    `json:"charge_calls"`
	// DBPayments are the phase's payments whose row names the account.
	DBPayments int `json:"db_payments"`
}

// routesCheck is what one phase of the routes scenario counted and checked.
type routesCheck struct {
	Round    int    `json:"round"`
	Accounts int    `json:"accounts"`
	Phase    string `json:"phase"`
	// Answers are every answer of the phase (warm-up and the requests
	// finishing after the window included); Created those that were a fresh 201.
	Answers int64 `json:"answers"`
	Created int64 `json:"answers_201"`
	// StatementsTotal is what the gateway's database sessions received
	// during the phase, less KeyLookups, the API key lookups its auth
	// cache missed; Statements the same per answer, by kind.
	KeyLookups      int64        `json:"api_key_lookups"`
	StatementsTotal int64        `json:"statements"`
	Statements      statementMix `json:"statements_per_payment"`
	// Sessions are the gateway's database sessions whose counters make
	// Statements; those its pool opened or closed during the phase make
	// the count inexact (none should).
	Sessions       int              `json:"db_sessions"`
	SessionsOpened int              `json:"db_sessions_opened"`
	SessionsClosed int              `json:"db_sessions_closed"`
	Charges        []accountCharges `json:"charges"`
	// OtherDBPayments are the phase's payments naming no account of its gateway.
	OtherDBPayments int      `json:"db_payments_other_accounts"`
	Problems        []string `json:"problems,omitempty"`
	OK              bool     `json:"ok"`
}

// verify fills Problems and OK: one charge per 201 answered, from as many
// Charge calls, each where its payment says; two accounts about 1:1.
func (c *routesCheck) verify() {
	c.Problems = nil
	ledger, calls, succeeded := 0, 0, 0
	for _, a := range c.Charges {
		ledger += a.Ledger
		calls += a.ChargeCalls
		succeeded += a.Succeeded
		if a.DBPayments != a.Ledger {
			c.Problems = append(c.Problems, fmt.Sprintf("%d payment(s) name account %s, whose ledger holds %d charge(s)", a.DBPayments, a.Account, a.Ledger))
		}
	}
	if int64(ledger) != c.Created || int64(succeeded) != c.Created {
		c.Problems = append(c.Problems, fmt.Sprintf("the ledgers hold %d charge(s) (%d succeeded) for %d payment(s) answered 201", ledger, succeeded, c.Created))
	}
	if int64(calls) != c.Created {
		c.Problems = append(c.Problems, fmt.Sprintf("%d Charge call(s) for %d payment(s) answered 201", calls, c.Created))
	}
	if c.OtherDBPayments != 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("%d payment(s) name an account other than the gateway's", c.OtherDBPayments))
	}
	if len(c.Charges) == 2 {
		tol := routesShareTolerance(ledger)
		for _, a := range c.Charges {
			share := 0.0
			if ledger > 0 {
				share = float64(a.Ledger) / float64(ledger)
			}
			if math.Abs(share-0.5) > tol {
				c.Problems = append(c.Problems, fmt.Sprintf("account %s holds %.1f %% of %d charges, not 50 ± %.1f %%", a.Account, 100*share, ledger, 100*tol))
			}
		}
	}
	c.OK = len(c.Problems) == 0
}

// statementsPerPayment is the phases' statements over their answers, all rounds pooled.
func statementsPerPayment(checks []routesCheck) float64 {
	var stmts, answers int64
	for _, c := range checks {
		stmts += c.StatementsTotal
		answers += c.Answers
	}
	if answers == 0 {
		return 0
	}
	return float64(stmts) / float64(answers)
}

// routesStatementsHeld says whether the two accounts' phases issued at
// most routesStatementSlack statements per payment more than the one
// account's, and what each issued.
func routesStatementsHeld(one, two []routesCheck) (s1, s2 float64, ok bool) {
	s1, s2 = statementsPerPayment(one), statementsPerPayment(two)
	return s1, s2, s2 <= s1+routesStatementSlack
}

// routedGateway is a gateway of the routes scenario, with its fakes by account.
type routedGateway struct {
	*gateway
	accounts []string
	fakes    []*fake.PSP
}

// startRouted starts a gateway as the bench's: with one account, the fake
// alone as serve has it with GATEWAY_PSP only; with several, named
// accounts, each a fake of its own, on a default route weighting them
// equally, each watched by its breaker.
func (b *bench) startRouted(ctx context.Context, accounts ...string) (*routedGateway, error) {
	rg := &routedGateway{accounts: accounts}
	for range accounts {
		rg.fakes = append(rg.fakes, fake.New())
	}
	g, err := startGatewayWith(ctx, b.dbEnv.dsn, b.gw.logw, b.label, func(instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error) {
		if len(accounts) == 1 {
			return payments.OnePSP(instrument(rg.fakes[0])), nil
		}
		byName := map[string]psp.Adapter{}
		var route routing.Route
		for i, a := range accounts {
			byName[a] = instrument(rg.fakes[i])
			route = append(route, routing.Entry{Account: a, Weight: 1})
		}
		acc, err := payments.NewPSPs(accounts[0], byName)
		if err != nil {
			return nil, err
		}
		return acc, acc.WithRoutes(routing.Table{Default: route}, routing.NewHealth(acc.Names(), routing.DefaultBreaker, nil))
	})
	if err != nil {
		return nil, err
	}
	rg.gateway = g
	return rg, nil
}

func (b *bench) scenarioRoutes(ctx context.Context, hc *http.Client, rep *report) (err error) {
	one, err := b.startRouted(ctx, routing.Name(fake.New().Capabilities()))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, one.close()) }()
	two, err := b.startRouted(ctx, "fake_a", "fake_b")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, two.close()) }()

	var ones, twos []stats
	var oneChecks, twoChecks []routesCheck
	var rss int64
	for r := range b.opts.rounds {
		for _, side := range []struct {
			g      *routedGateway
			title  string
			phase  string
			st     *[]stats
			checks *[]routesCheck
		}{
			{one, "10 routes · 1 account", fmt.Sprintf("g10ar%d", r), &ones, &oneChecks},
			{two, "10 routes · 2 accounts", fmt.Sprintf("g10br%d", r), &twos, &twoChecks},
		} {
			st, peak, chk, err := b.routesPhase(ctx, hc, side.g, b.roundTitle(side.title, r), side.phase)
			if err != nil {
				return err
			}
			chk.Round = r + 1
			*side.st, *side.checks, rss = append(*side.st, st), append(*side.checks, chk), max(rss, peak)
			rep.Routes = append(rep.Routes, chk)
			if !chk.OK {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s: %s", b.roundTitle(side.title, r), strings.Join(chk.Problems, "; ")))
			}
		}
	}
	o := mergeStats(ones)
	rep.add(row{Scenario: scRoutes, Name: "fresh payments, route of 2 accounts 1:1 with breakers, 64 clients, PSP 0 ms", Unit: "req/s",
		Gateway: mergeStats(twos), Floor: &o, FloorLabel: "1 account", Reference: o.Throughput,
		Goal: routesGoal, GoalText: fmt.Sprintf(">= %.2f x 1 account", routesGoal), PeakRSSBytes: rss})
	s1, s2, held := routesStatementsHeld(oneChecks, twoChecks)
	rep.add(row{Scenario: scRoutes, Name: "  DB statements per payment, 2 accounts vs 1 (the gateway's sessions)", Unit: unitStatements,
		Gateway: stats{Throughput: s2}, FloorLabel: "1 account", Reference: s1, NoLatency: true,
		GoalText: fmt.Sprintf("<= 1 account + %.2f", routesStatementSlack), MetText: map[bool]string{true: "yes", false: "NO"}[held]})
	if !held {
		rep.Violations = append(rep.Violations, fmt.Sprintf("scenario %d: the route of 2 accounts issued %.3f statements per payment, the one account %.3f: more than %.2f above (all rounds)",
			scRoutes, s2, s1, routesStatementSlack))
	}
	return nil
}

// routesPhase makes fresh payments through g, counting the statements its
// database sessions received from before its first request to after its
// last answer, then checks its fakes' ledgers and the payments against the
// answers.
func (b *bench) routesPhase(ctx context.Context, hc *http.Client, g *routedGateway, title, phase string) (stats, int64, routesCheck, error) {
	chk := routesCheck{Accounts: len(g.accounts), Phase: phase}
	scenario := fmt.Sprintf("routes-%d", len(g.accounts))
	g.scenario.Store(&scenario)
	hc.CloseIdleConnections() // each phase dials its own, in its warm-up
	for _, f := range g.fakes {
		f.Reset()
		f.SetLatency(0)
	}
	var answers, created atomic.Int64
	grp := group{name: "gateway", clients: routesClients, op: func(ctx context.Context, c *client) error {
		key := b.key(phase, c)
		a, err := g.createPayment(ctx, hc, key, paymentBody(key))
		if err != nil {
			return err
		}
		answers.Add(1)
		if err := wantFresh(a); err != nil {
			return err
		}
		created.Add(1)
		return nil
	}}
	before, err := poolCounts(ctx, g.dbx)
	if err != nil {
		return stats{}, 0, chk, err
	}
	lookups := g.keyLookups.n.Load()
	b.rss.reset()
	st, err := b.runPhase(ctx, title, labels("client", scenario), grp)
	if err != nil {
		return stats{}, 0, chk, err
	}
	peak := b.rss.peak()
	after, err := poolCounts(ctx, g.dbx)
	if err != nil {
		return stats{}, 0, chk, err
	}
	chk.Answers, chk.Created = answers.Load(), created.Load()
	sum, opened, closed := poolStatements(before, after)
	// The auth cache's lookups are the same in both phases but come in
	// bursts, as many as the requests in flight when its entry lapses:
	// left out, what is counted is the payments' own.
	chk.KeyLookups = g.keyLookups.n.Load() - lookups
	sum.Questions -= chk.KeyLookups
	sum.Select -= chk.KeyLookups
	chk.StatementsTotal = sum.Questions
	chk.Statements, chk.Sessions, chk.SessionsOpened, chk.SessionsClosed = perPayment(sum, chk.Answers), len(after), opened, closed

	var inDB []struct {
		PSP string `db:"psp"`
		N   int    `db:"n"`
	}
	if err := b.floor.SelectContext(ctx, &inDB, `SELECT COALESCE(psp, '') AS psp, COUNT(*) AS n FROM payments
WHERE merchant_id = ? AND idem_key LIKE ? GROUP BY psp`, g.merchant.ID, phase+"-"+b.nonce+"-%"); err != nil {
		return stats{}, 0, chk, err
	}
	byAccount := map[string]int{}
	for _, r := range inDB {
		byAccount[r.PSP] = r.N
		chk.OtherDBPayments += r.N
	}
	for i, a := range g.accounts {
		f := g.fakes[i]
		chk.Charges = append(chk.Charges, accountCharges{Account: a, Ledger: f.ChargeCount(), Succeeded: f.SucceededCount(),
			ChargeCalls: f.ChargeCalls(), DBPayments: byAccount[a]})
		chk.OtherDBPayments -= byAccount[a]
	}
	chk.verify()
	return st[0], peak, chk, nil
}

// printRoutes is the routes scenario's part of the report.
func printRoutes(w io.Writer, checks []routesCheck) {
	if len(checks) == 0 {
		return
	}
	fmt.Fprintf(w, "\nRoutes (scenario %d): statements the gateway's database sessions received from each phase's first request\n"+
		"to its last answer (their own counters on the server), over its answers; charges in each account's fake ledger after it:\n", scRoutes)
	for _, c := range checks {
		var parts []string
		total := 0
		for _, a := range c.Charges {
			total += a.Ledger
		}
		for _, a := range c.Charges {
			share := ""
			if len(c.Charges) > 1 && total > 0 {
				share = fmt.Sprintf(" = %.1f %%", 100*float64(a.Ledger)/float64(total))
			}
			parts = append(parts, fmt.Sprintf("%s %d%s (%d Charge calls, %d payments name it)", a.Account, a.Ledger, share, a.ChargeCalls, a.DBPayments))
		}
		verdict := "held"
		if !c.OK {
			verdict = "VIOLATED: " + strings.Join(c.Problems, "; ")
		}
		churn := ""
		if c.SessionsOpened > 0 || c.SessionsClosed > 0 {
			churn = fmt.Sprintf(" (inexact: %d session(s) opened, %d closed during it)", c.SessionsOpened, c.SessionsClosed)
		}
		fmt.Fprintf(w, "  round %d, %d account(s): %d answers, %s over %d sessions%s, %d API key lookups left out; %d answered 201; ledgers %s — %s\n",
			c.Round, c.Accounts, c.Answers, c.Statements, c.Sessions, churn, c.KeyLookups, c.Created, strings.Join(parts, ", "), verdict)
	}
}
