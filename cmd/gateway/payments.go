package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gateway/payments"
	"gateway/review"
)

// paymentsCmd is `gateway payments`: what ops look at and decide.
type paymentsCmd struct {
	DB dsnConfig `embed:""`

	List    paymentsListCmd    `cmd:"" help:"List payments, oldest first, by status, merchant and age."`
	Show    paymentsShowCmd    `cmd:"" help:"Show one payment with its key's state and its resolution history."`
	Resolve paymentsResolveCmd `cmd:"" help:"Record an operator's decision on a payment in requires_review; kept in the audit table."`
}

func (c *paymentsCmd) check() []error { return c.DB.require() }

// paymentJSON is a payment as the API renders it, plus what only ops see.
type paymentJSON struct {
	payments.View
	MerchantID string  `json:"merchant_id"`
	UpdatedAt  *string `json:"updated_at"`
}

func toPaymentJSON(p payments.Payment) paymentJSON {
	return paymentJSON{View: payments.ToView(p), MerchantID: p.MerchantID, UpdatedAt: jsonTime(p.UpdatedAt)}
}

type paymentsListCmd struct {
	Status   string `name:"status" placeholder:"STATUS" help:"only this status: requires_confirmation, processing, requires_action, succeeded, declined, failed, canceled or requires_review"`
	Merchant string `name:"merchant" placeholder:"ID" id:"mer_" help:"only this merchant's payments (mer_…)"`
	Since    string `name:"since" placeholder:"WHEN" help:"only payments created since then: a time back from now (30m, 24h, 7d) or a date or time (2026-11-30, 2026-11-30T12:00:00Z)"`
	Limit    int    `name:"limit" default:"100" help:"most payments to list, 1 to 10000"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a table"`
}

func (l *paymentsListCmd) check() []error {
	var errs []error
	if l.Status != "" && !slices.Contains(payments.Statuses, payments.Status(l.Status)) {
		errs = append(errs, fmt.Errorf("--status %q is not a status: use %s", l.Status, payments.StatusNames()))
	}
	if l.Limit < 1 || l.Limit > review.MaxListLimit {
		errs = append(errs, fmt.Errorf("--limit must be 1 to %d", review.MaxListLimit))
	}
	if _, err := parseSince(l.Since, time.Now()); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// parseSince reads --since: a time back from now, a date, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q is neither a time back from now (30m, 24h, 7d) nor a date or time (2026-11-30, 2026-11-30T12:00:00Z)", s)
}

func (l *paymentsListCmd) Run(ctx context.Context, a *app, c *paymentsCmd) error {
	since, _ := parseSince(l.Since, time.Now()) // checked
	f := review.PaymentFilter{Status: payments.Status(l.Status), MerchantID: l.Merchant, Since: since, Limit: l.Limit}
	return withAdmin(ctx, c.DB, review.Config{}, func(adm *review.Admin) error {
		ps, more, err := adm.Payments(ctx, f)
		if err != nil {
			return adminError(err)
		}
		if l.JSON {
			out := struct {
				Payments []paymentJSON `json:"payments"`
				Count    int           `json:"count"`
				Limit    int           `json:"limit"`
				More     bool          `json:"more"`
			}{Payments: []paymentJSON{}, Count: len(ps), Limit: l.Limit, More: more}
			for _, p := range ps {
				out.Payments = append(out.Payments, toPaymentJSON(p))
			}
			return writeJSON(a.stdout, out)
		}
		tw := newTable(a.stdout, "PAYMENT", "MERCHANT", "STATUS", "AMOUNT", "CURRENCY", "ORDER", "CREATED")
		for _, p := range ps {
			row(tw, p.ID, p.MerchantID, p.Status, p.Amount.Minor, p.Amount.Currency, p.MerchantOrderID, timestamp(p.CreatedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d payment(s)", len(ps))
		if more {
			fmt.Fprintf(a.stdout, "; more match: raise --limit (now %d) or narrow --since", l.Limit)
		}
		fmt.Fprintln(a.stdout)
		return nil
	})
}

type paymentsShowCmd struct {
	ID   string `arg:"" name:"payment-id" id:"pay_" help:"the payment (pay_…)"`
	JSON bool   `name:"json" help:"print one JSON document instead of text"`
}

type keyStateJSON struct {
	State             string  `json:"state"`
	FencingToken      int64   `json:"fencing_token"`
	ChargeAttempts    int     `json:"charge_attempts"`
	ChargesNotSent    int     `json:"charges_not_sent"`
	LockedUntil       *string `json:"locked_until"`
	ReconcileAfter    *string `json:"reconcile_after"`
	ReconcileAttempts int     `json:"reconcile_attempts"`
	CompletedAt       *string `json:"completed_at"`
	ResponseStatus    int     `json:"response_status"`
}

type resolutionJSON struct {
	ID           string  `json:"id"`
	From         string  `json:"from"`
	To           string  `json:"to"`
	PSPReference *string `json:"psp_reference"`
	Reason       string  `json:"reason"`
	Actor        string  `json:"actor"`
	At           *string `json:"at"`
}

func (s *paymentsShowCmd) Run(ctx context.Context, a *app, c *paymentsCmd) error {
	return withAdmin(ctx, c.DB, review.Config{}, func(adm *review.Admin) error {
		rec, err := adm.PaymentRecord(ctx, s.ID)
		if err != nil {
			return adminError(err)
		}
		if s.JSON {
			return writeJSON(a.stdout, recordJSON(rec))
		}
		printRecord(a, rec)
		return nil
	})
}

func recordJSON(rec review.PaymentRecord) any {
	out := struct {
		Payment     paymentJSON      `json:"payment"`
		Key         *keyStateJSON    `json:"key"`
		Resolutions []resolutionJSON `json:"resolutions"`
	}{Payment: toPaymentJSON(rec.Payment), Resolutions: []resolutionJSON{}}
	if k := rec.Key; k != nil {
		out.Key = &keyStateJSON{State: string(k.State), FencingToken: int64(k.Token), ChargeAttempts: k.SendAttempts,
			ChargesNotSent: k.SendsNotSent, LockedUntil: jsonTime(k.LockedUntil),
			ReconcileAfter: jsonTime(k.ReconcileAfter), ReconcileAttempts: k.ReconcileAttempts,
			CompletedAt: jsonTime(k.CompletedAt), ResponseStatus: k.Response.Status}
	}
	for _, r := range rec.Resolutions {
		var ref *string
		if r.PSPReference != "" {
			ref = &r.PSPReference
		}
		out.Resolutions = append(out.Resolutions, resolutionJSON{ID: r.ID, From: string(r.From), To: string(r.To),
			PSPReference: ref, Reason: r.Reason, Actor: r.Actor, At: jsonTime(r.At)})
	}
	return out
}

func printRecord(a *app, rec review.PaymentRecord) {
	p := rec.Payment
	orNone := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	tw := newTable(a.stdout, "payment", p.ID)
	row(tw, "merchant", p.MerchantID)
	row(tw, "status", p.Status)
	row(tw, "amount", fmt.Sprintf("%d %s (minor units)", p.Amount.Minor, p.Amount.Currency))
	row(tw, "payment method", p.PaymentMethod)
	row(tw, "merchant order id", p.MerchantOrderID+" (what the PSP knows it by)")
	row(tw, "psp reference", orNone(p.PSPReference))
	row(tw, "decline code", orNone(p.DeclineCode))
	row(tw, "description", orNone(p.Description))
	row(tw, "created", timestamp(p.CreatedAt))
	row(tw, "updated", timestamp(p.UpdatedAt))
	row(tw, "idempotency key", keyState(rec))
	_ = tw.Flush()

	fmt.Fprintf(a.stdout, "\nResolutions: %d\n", len(rec.Resolutions))
	if len(rec.Resolutions) == 0 {
		return
	}
	tw = newTable(a.stdout, "AT", "FROM", "TO", "ACTOR", "PSP REFERENCE", "REASON")
	for _, r := range rec.Resolutions {
		row(tw, timestamp(r.At), r.From, r.To, r.Actor, orNone(r.PSPReference), r.Reason)
	}
	_ = tw.Flush()
}

// keyState says in a line where the payment's key stands.
func keyState(rec review.PaymentRecord) string {
	k := rec.Key
	switch {
	case k == nil:
		return "purged after retention (a reuse of the key answers 409 naming this payment)"
	case k.CompletedAt.IsZero():
		s := fmt.Sprintf("%s, fencing token %d, lease until %s, %d charge(s) allowed (%d certainly not sent), %d failed reconcile attempt(s)",
			k.State, k.Token, timestamp(k.LockedUntil), k.SendAttempts, k.SendsNotSent, k.ReconcileAttempts)
		if !k.ReconcileAfter.IsZero() {
			s += ", next look " + timestamp(k.ReconcileAfter)
		}
		return s
	}
	return fmt.Sprintf("%s at %s, replays HTTP %d", k.State, timestamp(k.CompletedAt), k.Response.Status)
}

type paymentsResolveCmd struct {
	ID           string `arg:"" name:"payment-id" id:"pay_" help:"the payment (pay_…); before or after the flags"`
	As           string `name:"as" placeholder:"succeeded|failed" help:"the outcome you established at the PSP (required)"`
	Reason       string `name:"reason" placeholder:"TEXT" help:"why; kept in the audit table (required)"`
	PSPReference string `name:"psp-reference" placeholder:"REF" help:"the PSP's id of the charge, when known"`
	Force        bool   `name:"force" help:"record the decision even when the PSP's answer contradicts it or the PSP cannot be asked, or correct a settled payment; --reason must say why"`
	Actor        string `name:"actor" env:"GATEWAY_ACTOR" placeholder:"NAME" help:"who decides; kept in the audit table (required)"`
	JSON         bool   `name:"json" help:"print one JSON document instead of a sentence"`

	// The payment's PSP is asked before the decision is recorded.
	PSP        pspConfig     `embed:""`
	PSPTimeout time.Duration `name:"psp-timeout" env:"GATEWAY_PSP_TIMEOUT" default:"10s" group:"psp" help:"deadline of the lookup at the payment's PSP"`
}

func (r *paymentsResolveCmd) check() []error {
	var errs []error
	if r.As != string(payments.Succeeded) && r.As != string(payments.Failed) {
		errs = append(errs, errors.New("--as must be succeeded or failed"))
	}
	if r.Reason == "" {
		errs = append(errs, errors.New("--reason is required: say what you found (it is kept in the audit table)"))
	}
	if r.Actor == "" {
		errs = append(errs, errors.New("--actor or GATEWAY_ACTOR must name who decides (it is kept in the audit table)"))
	}
	return positiveDuration(errs, "GATEWAY_PSP_TIMEOUT", r.PSPTimeout)
}

func (r *paymentsResolveCmd) Run(ctx context.Context, a *app, c *paymentsCmd) error {
	res := payments.Resolution{PaymentID: r.ID, To: payments.Status(r.As), Reason: r.Reason,
		PSPReference: r.PSPReference, Actor: r.Actor, Force: r.Force}
	if err := res.Validate(); err != nil {
		return adminError(err)
	}
	psps, err := newPSPs(r.PSP, noInstrument)
	if err != nil {
		return err
	}
	cfg := review.Config{PSPs: psps, PSPTimeout: r.PSPTimeout}
	return withAdmin(ctx, c.DB, cfg, func(adm *review.Admin) error {
		p, err := adm.Resolve(ctx, res)
		if err != nil {
			return adminError(err)
		}
		if r.JSON {
			type resolutionOut struct {
				To           string  `json:"to"`
				Reason       string  `json:"reason"`
				Actor        string  `json:"actor"`
				PSPReference *string `json:"psp_reference"`
				Force        bool    `json:"force"`
			}
			out := struct {
				Payment    paymentJSON   `json:"payment"`
				Resolution resolutionOut `json:"resolution"`
			}{toPaymentJSON(p), resolutionOut{To: r.As, Reason: r.Reason, Actor: r.Actor, Force: r.Force}}
			if r.PSPReference != "" {
				out.Resolution.PSPReference = &r.PSPReference
			}
			return writeJSON(a.stdout, out)
		}
		fmt.Fprintf(a.stdout, "payment %s is now %s (recorded: %s by %s)\n", p.ID, p.Status, res.Reason, res.Actor)
		return nil
	})
}
