package books

import (
	"fmt"

	"gateway/payments"
	"gateway/psp"
	"gateway/routing"
)

// verdict is what one comparison of the PSP's record with the gateway's
// found.
type verdict int

const (
	matched verdict = iota
	// unsettled: the gateway has not settled its record yet; the
	// reconciler, a capture or an operator will.
	unsettled
	// differs: a mismatch, said by the detail.
	differs
)

// unsettledStatus reports whether a payment in s is still being settled by
// someone else: the flow, the reconciler, its customer or an operator.
func unsettledStatus(s payments.Status) bool {
	switch s {
	case payments.Processing, payments.RequiresConfirmation, payments.RequiresAction, payments.RequiresReview:
		return true
	}
	return false
}

// tookNothing reports whether a payment in s says no money moved.
func tookNothing(s payments.Status) bool {
	return s == payments.Declined || s == payments.Failed || s == payments.Canceled
}

// compareCharge judges the PSP's charge line t against the gateway's
// payment p for the same order id.
func compareCharge(t psp.Transaction, p payments.Payment) (verdict, string) {
	if unsettledStatus(p.Status) || p.Operation != nil {
		return unsettled, ""
	}
	if t.Amount != p.Amount.Minor || t.Currency != p.Amount.Currency {
		return differs, fmt.Sprintf("the PSP charged %d %s, the gateway recorded %d %s", t.Amount, t.Currency, p.Amount.Minor, p.Amount.Currency)
	}
	says := func() string { return fmt.Sprintf("the PSP says %s, the gateway %s", t.Status, p.Status) }
	switch psp.ChargeStatus(t.Status) {
	case psp.Succeeded:
		if p.Status != payments.Succeeded {
			return differs, says()
		}
		if took := captured(t); took != p.Captured() {
			return differs, fmt.Sprintf("the PSP captured %d %s, the gateway recorded %d", took, t.Currency, p.Captured())
		}
		return matched, ""
	case psp.Authorized:
		if p.Status == payments.RequiresCapture {
			return matched, ""
		}
		return differs, says()
	case psp.Declined, psp.Voided:
		if tookNothing(p.Status) {
			return matched, ""
		}
		if p.Status == payments.RequiresCapture && psp.ChargeStatus(t.Status) == psp.Voided {
			// A lapsed authorization the gateway's expiry has not reached.
			return unsettled, ""
		}
		return differs, says()
	}
	// Pending at the PSP while the gateway settled: the PSP may still
	// charge, or already did.
	return differs, says()
}

// captured is what a succeeded charge line took.
func captured(t psp.Transaction) int64 {
	if t.AmountCaptured > 0 {
		return t.AmountCaptured
	}
	return t.Amount
}

// compareAttempt judges a charge line of an earlier attempt of a
// failed-over payment against what the attempt's check found.
func compareAttempt(t psp.Transaction, a Attempt) (verdict, string) {
	switch routing.AttemptOutcome(a.Outcome) {
	case routing.AttemptCharged, routing.AttemptExtraCharge, routing.AttemptExtraReturned:
		return matched, ""
	}
	if !t.MovedMoney() {
		return matched, ""
	}
	if !a.Checked {
		return unsettled, ""
	}
	return differs, fmt.Sprintf("the PSP %s this earlier attempt; its check recorded %s", t.Status, a.Outcome)
}

// compareRefund judges the PSP's refund line t against the gateway's
// refund r.
func compareRefund(t psp.Transaction, r payments.Refund) (verdict, string) {
	switch r.Status {
	case payments.RefundPending, payments.RefundRequiresReview:
		return unsettled, ""
	}
	if t.Amount != r.Amount.Minor || t.Currency != r.Amount.Currency {
		return differs, fmt.Sprintf("the PSP refunded %d %s, the gateway recorded %d %s", t.Amount, t.Currency, r.Amount.Minor, r.Amount.Currency)
	}
	moved := t.MovedMoney()
	if moved == (r.Status == payments.RefundSucceeded) {
		return matched, ""
	}
	return differs, fmt.Sprintf("the PSP says the refund %s, the gateway %s", t.Status, r.Status)
}

// compareLookup judges what the PSP's lookup answered for a payment the
// gateway says moved money, when its ledger did not show it: nil error
// with c, or psp.ErrNotFound.
func compareLookup(p payments.Payment, c psp.Charge) (verdict, string) {
	t := psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: c.MerchantOrderID, Reference: c.Reference,
		Status: string(c.Status), Amount: c.Amount, AmountCaptured: c.AmountCaptured, Currency: c.Currency}
	return compareCharge(t, p)
}
