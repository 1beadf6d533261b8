package metrics_test

// Tests of the monitoring files under deploy/: every metric, label and label
// value that the alert rules and the Grafana dashboard use must be one the
// gateway really exports, and promtool (Debian package `prometheus`) must
// accept the rules, the scrape configuration and the rule unit tests.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gateway/books"

	"github.com/prometheus/client_golang/prometheus"

	"gateway/metrics"
	"gateway/payments"
	"gateway/psp"
	"gateway/reconcile"
	"gateway/routing"
	"gateway/webhooks"
)

var (
	deployDir     = filepath.Join("..", "deploy")
	alertsFile    = filepath.Join(deployDir, "prometheus", "alerts.yml")
	alertsTest    = filepath.Join(deployDir, "prometheus", "alerts_test.yml")
	promConfig    = filepath.Join(deployDir, "prometheus", "prometheus.yml")
	dashboardFile = filepath.Join(deployDir, "grafana", "gateway-dashboard.json")
)

// routes are the route patterns api.Server reports (see api/routes.go), plus
// "other" for every request outside them.
var routes = []string{"/healthz", "/readyz", "/openapi.json", "/payments", "/payments/:id", "other"}

// series is what the gateway exports under one sample name.
type series struct {
	family string              // the family the name belongs to
	labels map[string][]string // label name → values seen
}

// exported builds the gateway's metrics, touches every collector through its
// public methods and returns every sample name a scrape would show (with the
// _bucket, _sum and _count series of histograms).
func exported(t *testing.T) map[string]series {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	for _, r := range routes {
		m.ObserveHTTP(r, "GET", 200, 3*time.Millisecond)
	}
	m.ObserveHTTP("/payments", "POST", 201, 80*time.Millisecond)
	m.ObserveHTTP("/payments", "POST", 500, time.Millisecond)
	for _, o := range payments.KeyOutcomes {
		m.KeyOutcome(o)
	}
	m.InFlightWaited(40 * time.Millisecond)
	m.LeaseTakenOver()
	m.FencingRefused()
	m.MissingKey()
	m.RateLimited()
	for _, o := range reconcile.Outcomes {
		m.Settled(o)
	}
	m.Purged(3)
	m.PassDone(payments.Backlog{NeedsReview: 2, OldestUnfinished: 5 * time.Minute, Quarantined: 1, OldestReview: time.Hour})
	m.UnconfiguredPSP()
	m.FailedOver("fake_a", "fake_b")
	m.ExtraCharge("fake_a", true)
	m.WatchBreakers([]string{"fake_a"}, routing.NewHealth([]string{"fake_a"}, routing.DefaultBreaker, nil))
	m.ClockSkew(30 * time.Millisecond)
	m.BooksAccounts([]string{"fake_a"})
	m.BooksFound(books.Discrepancy{Account: "fake_a", Class: books.OrphanCharge})
	m.BooksStanding(books.Standing{Open: map[string]map[books.Class]int{"fake_a": {books.OrphanCharge: 1}},
		LastComplete: map[string]time.Time{"fake_a": time.Unix(1_800_000_000, 0)}})
	for _, st := range []payments.Status{payments.Succeeded, payments.Declined, payments.Failed, payments.Canceled, payments.RequiresReview} {
		m.PaymentRecorded(st, "")
	}
	m.PaymentRecorded(payments.Declined, "card_declined")
	m.PaymentRecorded(payments.Declined, "some PSP's own code")
	for _, st := range []payments.RefundStatus{payments.RefundSucceeded, payments.RefundFailed, payments.RefundRequiresReview} {
		m.RefundRecorded(st)
	}

	// PSP calls go through the real wrapper, so the op and outcome label
	// values are the ones its classification produces.
	a := metrics.InstrumentPSP(fakePSP{}, m)
	ctx := context.Background()
	for _, err := range []error{nil, psp.ErrNotFound, &psp.Error{Class: psp.NotProcessed, Op: "charge", Err: errors.New("refused")},
		&psp.Error{Class: psp.Unknown, Op: "charge", Err: errors.New("timeout")}, errors.New("unclassified")} {
		_, _ = a.Charge(context.WithValue(ctx, fakeErr{}, err), psp.ChargeRequest{})
		_, _ = a.Lookup(context.WithValue(ctx, fakeErr{}, err), "ord_1")
	}
	m.PSPCall("fake", "charge", "result", time.Millisecond)

	w := metrics.NewWebhooks(reg)
	for _, o := range []webhooks.Outcome{webhooks.OutcomeDelivered, webhooks.OutcomeRetry, webhooks.OutcomeFailed, webhooks.OutcomeFenced} {
		w.DeliveryAttempted(o, 20*time.Millisecond)
	}
	w.DeliveryLag(2 * time.Second)
	w.EndpointDisabled()
	w.DeliveryBacklog(webhooks.Backlog{Pending: 3, Due: 1, NotFannedOut: 2, OldestUndelivered: time.Minute})

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Every collector must have been touched: an untouched vector exports
	// nothing, and its name would then be wrongly reported as unknown.
	if n := reflect.TypeFor[metrics.Metrics]().NumField() + reflect.TypeFor[metrics.Webhooks]().NumField(); len(fams) != n {
		var names []string
		for _, f := range fams {
			names = append(names, f.GetName())
		}
		t.Fatalf("Metrics has %d collectors but only %d families were gathered (%v): touch the new collector in exported()", n, len(fams), names)
	}

	out := map[string]series{}
	add := func(name, family string, labels map[string][]string) {
		out[name] = series{family: family, labels: labels}
	}
	for _, f := range fams {
		labels := map[string][]string{}
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if !slices.Contains(labels[lp.GetName()], lp.GetValue()) {
					labels[lp.GetName()] = append(labels[lp.GetName()], lp.GetValue())
				}
			}
		}
		name := f.GetName()
		if f.GetType().String() == "HISTOGRAM" {
			bucket := map[string][]string{"le": nil}
			for k, v := range labels {
				bucket[k] = v
			}
			add(name+"_bucket", name, bucket)
			add(name+"_sum", name, labels)
			add(name+"_count", name, labels)
			continue
		}
		add(name, name, labels)
	}
	return out
}

type fakeErr struct{}

// fakePSP answers every call with the error its context carries. Methods it
// does not define panic through the nil embedded interface.
type fakePSP struct{ psp.Adapter }

func (fakePSP) Capabilities() psp.Capabilities { return psp.Capabilities{Name: "fake"} }

func (fakePSP) Charge(ctx context.Context, _ psp.ChargeRequest) (psp.Charge, error) {
	err, _ := ctx.Value(fakeErr{}).(error)
	return psp.Charge{}, err
}

func (fakePSP) Lookup(ctx context.Context, _ string) (psp.Charge, error) {
	err, _ := ctx.Value(fakeErr{}).(error)
	return psp.Charge{}, err
}

// Labels Prometheus adds at scrape time, and series that are not the
// gateway's own.
var (
	targetLabels = []string{"job", "instance"}
	otherSeries  = map[string][]string{"up": nil,
		// Registered beside the Metrics by the serving process (cmd/gateway).
		"go_sql_in_use_connections": nil, "go_sql_idle_connections": nil, "go_sql_max_open_connections": nil,
		"go_sql_wait_count_total": nil, "go_sql_wait_duration_seconds_total": nil, "gateway_build_info": {"version", "revision", "goversion"}}
)

var (
	reString     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	reSelector   = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}`)
	reMatcher    = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$`)
	reGrouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	reRange      = regexp.MustCompile(`\[[^\]]*\]`)
	reToken      = regexp.MustCompile(`\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	reGatewayTok = regexp.MustCompile(`\bgateway_[a-z0-9_]+`)
	keywords     = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
		"bool", "offset", "inf", "nan", "Inf", "NaN"}
)

// checkExpr reports every metric, label or label value in a PromQL
// expression that the gateway does not export.
func checkExpr(exp map[string]series, expr string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	known := func(name string) (map[string][]string, bool) {
		if s, ok := exp[name]; ok {
			return s.labels, true
		}
		if _, ok := otherSeries[name]; ok {
			return nil, true
		}
		return nil, false
	}

	// Selectors: the metric and the labels it is matched on.
	for _, m := range reSelector.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		labels, ok := known(name)
		if name == "" {
			bad("selector {%s} without a metric name", m[2])
			continue
		}
		if !ok {
			bad("unknown metric %q", name)
			continue
		}
		for _, matcher := range splitMatchers(m[2]) {
			mm := reMatcher.FindStringSubmatch(matcher)
			if mm == nil {
				bad("%s: cannot read matcher %q", name, matcher)
				continue
			}
			label, op, value := mm[1], mm[2], mm[3]
			if slices.Contains(targetLabels, label) {
				continue
			}
			if _, other := otherSeries[name]; other {
				continue
			}
			values, ok := labels[label]
			if !ok {
				bad("%s has no label %q", name, label)
				continue
			}
			if label == "le" || label == "status" || label == "method" || label == "adapter" {
				if op == "=~" || op == "!~" {
					if _, err := regexp.Compile("^(?:" + value + ")$"); err != nil {
						bad("%s{%s}: bad regexp: %v", name, matcher, err)
					}
				}
				continue // open-ended values
			}
			switch op {
			case "=", "!=":
				if !slices.Contains(values, value) {
					bad("%s{%s}: the gateway never exports %s=%q (it does: %v)", name, matcher, label, value, values)
				}
			case "=~", "!~":
				re, err := regexp.Compile("^(?:" + value + ")$")
				if err != nil {
					bad("%s{%s}: bad regexp: %v", name, matcher, err)
					continue
				}
				// Every alternative must match a value, or it is a typo.
				for _, alt := range strings.Split(value, "|") {
					are, err := regexp.Compile("^(?:" + alt + ")$")
					if err != nil {
						are = re
					}
					if !slices.ContainsFunc(values, are.MatchString) {
						bad("%s{%s}: %q matches no %s the gateway exports (%v)", name, matcher, alt, label, values)
					}
				}
			}
		}
	}

	// Grouping labels must exist on some gateway series.
	for _, m := range reGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[2], ",") {
			l = strings.TrimSpace(l)
			if l != "" && !anyHasLabel(exp, l) {
				bad("%s (%s): no gateway metric has the label %q", m[1], m[2], l)
			}
		}
	}

	// Bare metric names: strip strings, selectors' bodies, ranges and
	// grouping lists; what is left and not a function, keyword or number is
	// a metric name.
	s := reString.ReplaceAllString(expr, `""`)
	s = reSelector.ReplaceAllString(s, "$1")
	s = reRange.ReplaceAllString(s, "")
	s = reGrouping.ReplaceAllString(s, " ")
	for _, loc := range reToken.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || slices.Contains(keywords, tok) {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if _, ok := known(tok); !ok {
			bad("unknown metric %q", tok)
		}
	}
	return problems
}

// splitMatchers splits a selector body on the commas outside quotes.
func splitMatchers(body string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(body):
			cur.WriteByte(c)
			i++
			c = body[i]
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			if strings.TrimSpace(cur.String()) != "" {
				out = append(out, cur.String())
			}
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}

func anyHasLabel(exp map[string]series, label string) bool {
	if slices.Contains(targetLabels, label) {
		return true
	}
	for _, labels := range otherSeries {
		if slices.Contains(labels, label) {
			return true
		}
	}
	for _, s := range exp {
		if _, ok := s.labels[label]; ok {
			return true
		}
	}
	return false
}

func TestCheckExprCatchesMistakes(t *testing.T) {
	exp := exported(t)
	for _, tc := range []struct{ expr, want string }{
		{`sum(rate(gateway_http_requests_total{status=~"5.."}[5m]))`, ""},
		{`histogram_quantile(0.99, sum by (le, route) (rate(gateway_http_request_duration_seconds_bucket[5m]))) > 1e1`, ""},
		{`up{job="gateway"} == 0`, ""},
		{`rate(gateway_http_request_total[5m])`, `unknown metric "gateway_http_request_total"`},
		{`gateway_payments_requires_review > 0 and gateway_payment_review > 0`, `unknown metric "gateway_payment_review"`},
		{`rate(gateway_psp_calls_total{outcome="unknwon"}[5m])`, `never exports outcome="unknwon"`},
		{`rate(gateway_psp_calls_total{result="unknown"}[5m])`, `has no label "result"`},
		{`rate(gateway_http_requests_total{route!~"/healthz|/ready"}[5m])`, `"/ready" matches no route`},
		{`sum by (merchant) (rate(gateway_psp_calls_total[5m]))`, `no gateway metric has the label "merchant"`},
		{`rate(gateway_http_request_duration_seconds[5m])`, `unknown metric "gateway_http_request_duration_seconds"`},
	} {
		got := strings.Join(checkExpr(exp, tc.expr), "; ")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("checkExpr(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// alertRule is one rule of alerts.yml, read line by line: promtool checks
// the YAML itself; this only needs the file's own layout.
type alertRule struct {
	name, expr string
	line       int
	body       string // the rule's lines
}

var (
	reRuleStart = regexp.MustCompile(`^(\s*)- (alert|record):\s*(\S+)\s*$`)
	reExpr      = regexp.MustCompile(`^(\s*)expr:\s*(.*)$`)
)

func readRules(t *testing.T, path string) []alertRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var rules []alertRule
	for i := 0; i < len(lines); i++ {
		m := reRuleStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		r := alertRule{name: m[3], line: i + 1}
		indent := len(m[1])
		j := i + 1
		for ; j < len(lines); j++ {
			l := lines[j]
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#") &&
				len(l)-len(strings.TrimLeft(l, " ")) <= indent {
				break
			}
			if em := reExpr.FindStringSubmatch(l); em != nil {
				r.expr = readScalar(lines, j, len(em[1]), em[2])
			}
		}
		r.body = strings.Join(lines[i:j], "\n")
		if r.expr == "" {
			t.Fatalf("%s:%d: rule %s: no expr found", path, r.line, r.name)
		}
		rules = append(rules, r)
		i = j - 1
	}
	return rules
}

// readScalar reads a YAML scalar that starts after "key:" on line i: a plain
// or quoted one-liner, or a block (|, |-, >, >-) indented below the key.
func readScalar(lines []string, i, keyIndent int, first string) string {
	first = strings.TrimSpace(first)
	if first == "" || first[0] != '|' && first[0] != '>' {
		if len(first) >= 2 && (first[0] == '"' || first[0] == '\'') && first[len(first)-1] == first[0] {
			first = first[1 : len(first)-1]
		}
		return first
	}
	var block []string
	for k := i + 1; k < len(lines); k++ {
		l := lines[k]
		if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) <= keyIndent {
			break
		}
		block = append(block, strings.TrimSpace(l))
	}
	return strings.TrimSpace(strings.Join(block, "\n"))
}

func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exp := exported(t)
	rules := readRules(t, alertsFile)
	if len(rules) < 4 {
		t.Fatalf("only %d rules read from %s", len(rules), alertsFile)
	}
	for _, r := range rules {
		for _, p := range checkExpr(exp, r.expr) {
			t.Errorf("%s:%d: %s: %s", alertsFile, r.line, r.name, p)
		}
	}

	// Every gateway_* name anywhere in the file, comments included, is real.
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reGatewayTok.FindAllString(string(data), -1) {
		if _, ok := exp[name]; !ok {
			t.Errorf("%s names %q, which the gateway does not export", alertsFile, name)
		}
	}
	// Templates may only use labels the series carry.
	for _, m := range regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`).FindAllStringSubmatch(string(data), -1) {
		if !anyHasLabel(exp, m[1]) {
			t.Errorf("%s: template uses $labels.%s, which no gateway series has", alertsFile, m[1])
		}
	}
}

func TestAlertRulesAreActionable(t *testing.T) {
	rules := readRules(t, alertsFile)
	seen := map[string]bool{}
	for _, r := range rules {
		where := fmt.Sprintf("%s:%d: %s", alertsFile, r.line, r.name)
		if !strings.Contains(r.body, "- alert:") {
			continue // recording rules need none of this
		}
		if seen[r.name] {
			t.Errorf("%s: duplicate alert name", where)
		}
		seen[r.name] = true
		if !regexp.MustCompile(`^Gateway[A-Z][A-Za-z0-9]+$`).MatchString(r.name) {
			t.Errorf("%s: alert names are CamelCase and start with Gateway", where)
		}
		if !regexp.MustCompile(`(?m)^\s+for:\s*\d+[smh]\s*$`).MatchString(r.body) {
			t.Errorf("%s: no for: duration", where)
		}
		if !regexp.MustCompile(`(?m)^\s+severity:\s*(critical|warning|info)\s*$`).MatchString(r.body) {
			t.Errorf("%s: no severity label (critical, warning or info)", where)
		}
		for _, a := range []string{"summary", "description"} {
			if !regexp.MustCompile(`(?m)^\s+` + a + `:\s*\S`).MatchString(r.body) {
				t.Errorf("%s: no %s annotation", where, a)
			}
		}
	}
	for _, want := range []string{"GatewayPaymentsRequireReview", "GatewayIdempotencyKeyStuck",
		"GatewayPSPUnknownOutcomeRate", "GatewayIdempotencyMismatchSpike"} {
		if !seen[want] {
			t.Errorf("%s: alert %s is missing", alertsFile, want)
		}
	}

	// alerts_test.yml has, for every alert, a case where it fires and one
	// where it does not.
	data, err := os.ReadFile(alertsTest)
	if err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		m := regexp.MustCompile(`^\s*alertname:\s*(\S+)`).FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for _, next := range lines[i+1:] {
			if e := strings.TrimSpace(next); strings.HasPrefix(e, "exp_alerts:") {
				if strings.TrimSpace(strings.TrimPrefix(e, "exp_alerts:")) == "[]" {
					quiet[m[1]] = true
				} else {
					fires[m[1]] = true
				}
				break
			}
		}
	}
	for name := range seen {
		if !fires[name] {
			t.Errorf("%s: no test where %s fires", alertsTest, name)
		}
		if !quiet[name] {
			t.Errorf("%s: no test where %s stays quiet", alertsTest, name)
		}
	}
	for name := range fires {
		if !seen[name] {
			t.Errorf("%s: tests %s, which alerts.yml does not define", alertsTest, name)
		}
	}
}

// dashboard is the part of a Grafana dashboard these tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasourceRef           `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Panels     []panel                  `json:"panels"` // a collapsed row's panels
	Targets    []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaVars turns a dashboard query into PromQL.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "1m", "${__interval}", "1m",
	"$__range", "1h", "${__range}", "1h", "${job}", ".*", "$job", ".*", "${instance}", ".*", "$instance", ".*",
)

func TestDashboard(t *testing.T) {
	exp := exported(t)
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want a current one (39)", d.SchemaVersion)
	}
	var dsVar string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			dsVar = "${" + v.Name + "}"
		}
		if v.Type == "query" {
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				var s string
				if err := json.Unmarshal(v.Query, &s); err != nil {
					t.Errorf("variable %s: unreadable query %s", v.Name, v.Query)
				}
				q.Query = s
			}
			inner := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_]+)\)$`).FindStringSubmatch(q.Query)
			if inner == nil {
				t.Errorf("variable %s: query %q is not label_values(SERIES, LABEL)", v.Name, q.Query)
				continue
			}
			for _, p := range checkExpr(exp, grafanaVars.Replace(inner[1])) {
				t.Errorf("variable %s: %s", v.Name, p)
			}
			if !anyHasLabel(exp, inner[2]) {
				t.Errorf("variable %s: no gateway series has the label %q", v.Name, inner[2])
			}
		}
	}
	if dsVar == "" {
		t.Fatalf("no datasource variable in templating")
	}

	ids := map[int]string{}
	var exprs []string
	used := map[string]bool{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var placed []rect
	for _, p := range allPanels(d.Panels) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" {
			t.Errorf("%s: no title", where)
		}
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id also used by %q", where, other)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: bad gridPos %+v", where, g)
		}
		for _, o := range placed {
			if g.X < o.x+o.w && o.x < g.X+g.W && g.Y < o.y+o.h && o.y < g.Y+g.H {
				t.Errorf("%s overlaps %q", where, o.title)
			}
		}
		placed = append(placed, rect{p.Title, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		if p.Datasource == nil || p.Datasource.UID != dsVar {
			t.Errorf("%s: datasource %+v, want uid %s", where, p.Datasource, dsVar)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: missing or repeated refId %q", where, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != dsVar {
				t.Errorf("%s: query datasource %+v, want uid %s", where, tg.Datasource, dsVar)
			}
			q := grafanaVars.Replace(tg.Expr)
			if strings.Contains(q, "$") {
				t.Errorf("%s: unknown variable in %q", where, tg.Expr)
			}
			for _, pr := range checkExpr(exp, q) {
				t.Errorf("%s: %s", where, pr)
			}
			for _, m := range regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`).FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !anyHasLabel(exp, m[1]) {
					t.Errorf("%s: legend uses {{%s}}, which no gateway series has", where, m[1])
				}
			}
			for _, name := range reGatewayTok.FindAllString(q, -1) {
				if s, ok := exp[name]; ok {
					used[s.family] = true
				}
			}
			exprs = append(exprs, q)
		}
	}
	// Every family the gateway exports is shown somewhere.
	for _, s := range exp {
		if !used[s.family] {
			t.Errorf("no dashboard panel shows %s", s.family)
		}
	}

	// promtool parses the queries too, as recording rules.
	if promtool := promtoolPath(t); promtool != "" {
		type rule struct {
			Record string `json:"record"`
			Expr   string `json:"expr"`
		}
		var rs []rule
		for i, e := range exprs {
			rs = append(rs, rule{Record: fmt.Sprintf("dashboard_query_%d", i), Expr: e})
		}
		f := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}}
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "dashboard-queries.yml") // JSON is YAML
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		runPromtool(t, promtool, "check", "rules", path)
	}
}

func TestPrometheusConfig(t *testing.T) {
	data, err := os.ReadFile(promConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"127.0.0.1:9091", "metrics_path: /metrics", "- alerts.yml"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not contain %q", promConfig, want)
		}
	}
}

func TestPromtool(t *testing.T) {
	promtool := promtoolPath(t)
	if promtool == "" {
		t.Skip("promtool is not installed: run make deps (or apt-get install --no-install-recommends prometheus) " +
			"to check the rules, the config and the rule tests")
	}
	if out, err := exec.Command(promtool, "--version").CombinedOutput(); err == nil {
		t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
	}
	runPromtool(t, promtool, "check", "rules", alertsFile)
	runPromtool(t, promtool, "check", "config", promConfig)
	runPromtool(t, promtool, "test", "rules", alertsTest)
}

// promtoolPath returns promtool's path, or "" when it is not installed.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		return ""
	}
	return p
}

func runPromtool(t *testing.T, promtool string, args ...string) {
	t.Helper()
	abs := make([]string, len(args))
	for i, a := range args {
		abs[i] = a
		if strings.Contains(a, string(filepath.Separator)) {
			if p, err := filepath.Abs(a); err == nil {
				abs[i] = p
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, abs...)
	cmd.Dir = filepath.Join(deployDir, "prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		return
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}
