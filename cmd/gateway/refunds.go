package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gateway/payments"
	"gateway/review"
)

// refundsCmd is `gateway refunds`: what ops look at and decide about refunds.
type refundsCmd struct {
	DB dsnConfig `embed:""`

	List    refundsListCmd    `cmd:"" help:"List refunds, oldest first, by status, merchant or payment."`
	Resolve refundsResolveCmd `cmd:"" help:"Record an operator's decision on a refund in requires_review; kept in the audit table."`
}

func (c *refundsCmd) check() []error { return c.DB.require() }

// refundJSON is a refund as the API renders it, plus what only ops see.
type refundJSON struct {
	payments.RefundView
	MerchantID   string  `json:"merchant_id"`
	ReviewReason *string `json:"review_reason"`
}

func toRefundJSON(r payments.Refund) refundJSON {
	out := refundJSON{RefundView: payments.ToRefundView(r), MerchantID: r.MerchantID}
	if r.ReviewReason != "" {
		out.ReviewReason = &r.ReviewReason
	}
	return out
}

type refundsListCmd struct {
	Status   string `name:"status" placeholder:"STATUS" help:"only this status: pending, succeeded, failed or requires_review"`
	Merchant string `name:"merchant" placeholder:"ID" id:"mer_" help:"only this merchant's refunds (mer_…)"`
	Payment  string `name:"payment" placeholder:"ID" id:"pay_" help:"only this payment's refunds (pay_…)"`
	Limit    int    `name:"limit" default:"100" help:"most refunds to list, 1 to 10000"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a table"`
}

func (l *refundsListCmd) check() []error {
	var errs []error
	if l.Status != "" && !slices.Contains(payments.RefundStatuses, l.Status) {
		errs = append(errs, fmt.Errorf("--status %q is not a refund status: use pending, succeeded, failed or requires_review", l.Status))
	}
	if l.Limit < 1 || l.Limit > review.MaxListLimit {
		errs = append(errs, fmt.Errorf("--limit must be 1 to %d", review.MaxListLimit))
	}
	return errs
}

func (l *refundsListCmd) Run(ctx context.Context, a *app, c *refundsCmd) error {
	f := review.RefundFilter{Status: payments.RefundStatus(l.Status), MerchantID: l.Merchant, PaymentID: l.Payment, Limit: l.Limit}
	return withAdmin(ctx, c.DB, review.Config{}, func(adm *review.Admin) error {
		rs, more, err := adm.Refunds(ctx, f)
		if err != nil {
			return adminError(err)
		}
		if l.JSON {
			out := struct {
				Refunds []refundJSON `json:"refunds"`
				Count   int          `json:"count"`
				Limit   int          `json:"limit"`
				More    bool         `json:"more"`
			}{Refunds: []refundJSON{}, Count: len(rs), Limit: l.Limit, More: more}
			for _, r := range rs {
				out.Refunds = append(out.Refunds, toRefundJSON(r))
			}
			return writeJSON(a.stdout, out)
		}
		tw := newTable(a.stdout, "REFUND", "PAYMENT", "MERCHANT", "STATUS", "AMOUNT", "CURRENCY", "CREATED", "REVIEW REASON")
		for _, r := range rs {
			reason := r.ReviewReason
			if reason == "" {
				reason = "-"
			}
			row(tw, r.ID, r.PaymentID, r.MerchantID, r.Status, r.Amount.Minor, r.Amount.Currency, timestamp(r.CreatedAt), reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d refund(s)", len(rs))
		if more {
			fmt.Fprintf(a.stdout, "; more match: raise --limit (now %d)", l.Limit)
		}
		fmt.Fprintln(a.stdout)
		return nil
	})
}

type refundsResolveCmd struct {
	ID           string `arg:"" name:"refund-id" id:"re_" help:"the refund (re_…); before or after the flags"`
	As           string `name:"as" placeholder:"succeeded|failed" help:"the outcome you established at the PSP (required)"`
	Reason       string `name:"reason" placeholder:"TEXT" help:"why; kept in the audit table (required)"`
	PSPReference string `name:"psp-reference" placeholder:"REF" help:"the PSP's id of the refund, when known"`
	Force        bool   `name:"force" help:"record the decision even when the PSP's answer contradicts it or the PSP cannot be asked, or correct a settled refund; --reason must say why"`
	Actor        string `name:"actor" env:"GATEWAY_ACTOR" placeholder:"NAME" help:"who decides; kept in the audit table (required)"`
	JSON         bool   `name:"json" help:"print one JSON document instead of a sentence"`

	// The refund's PSP is asked before the decision is recorded.
	PSP        pspConfig     `embed:""`
	PSPTimeout time.Duration `name:"psp-timeout" env:"GATEWAY_PSP_TIMEOUT" default:"10s" group:"psp" help:"deadline of the lookup at the refund's PSP"`
}

func (r *refundsResolveCmd) check() []error {
	var errs []error
	if r.As != string(payments.RefundSucceeded) && r.As != string(payments.RefundFailed) {
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

func (r *refundsResolveCmd) Run(ctx context.Context, a *app, c *refundsCmd) error {
	res := review.RefundResolution{RefundID: r.ID, To: payments.RefundStatus(r.As), Reason: r.Reason,
		PSPReference: r.PSPReference, Actor: r.Actor, Force: r.Force}
	psps, err := newPSPs(r.PSP, noInstrument)
	if err != nil {
		return err
	}
	cfg := review.Config{PSPs: psps, PSPTimeout: r.PSPTimeout}
	return withAdmin(ctx, c.DB, cfg, func(adm *review.Admin) error {
		x, err := adm.ResolveRefund(ctx, res)
		if err != nil {
			return adminError(err)
		}
		if r.JSON {
			return writeJSON(a.stdout, struct {
				Refund refundJSON `json:"refund"`
				Actor  string     `json:"actor"`
				Reason string     `json:"reason"`
				Force  bool       `json:"force"`
			}{toRefundJSON(x), r.Actor, r.Reason, r.Force})
		}
		fmt.Fprintf(a.stdout, "refund %s of payment %s is now %s (recorded: %s by %s)\n", x.ID, x.PaymentID, x.Status, r.Reason, r.Actor)
		return nil
	})
}
