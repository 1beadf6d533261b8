package routing

import "time"

// Attempt is an earlier attempt of a payment (design §16): sent to its
// account under its own order id, it ended certainly not processed, and
// the reconciler checks it at its account once its creation window passed.
type Attempt struct {
	Number          int            `json:"attempt"`
	PSP             string         `json:"account"`
	MerchantOrderID string         `json:"order_id"`
	Outcome         AttemptOutcome `json:"outcome"`
	PSPCode         string         `json:"psp_code,omitempty"`
	PSPReference    string         `json:"psp_reference,omitempty"`
	StartedAt       time.Time      `json:"started_at"`
	EndedAt         time.Time      `json:"ended_at"`
}

// AttemptOutcome is what an earlier attempt came to.
type AttemptOutcome string

const (
	// AttemptNotProcessed: it ended certainly not processed; not checked yet.
	AttemptNotProcessed AttemptOutcome = "not_processed"
	// AttemptAbsent: its account holds nothing under its order id, past
	// its creation window.
	AttemptAbsent AttemptOutcome = "absent"
	// AttemptExtraCharge: its account charged it anyway while another
	// attempt charged too: it is being given back.
	AttemptExtraCharge AttemptOutcome = "extra_charge"
	// AttemptExtraReturned: that extra charge was refunded (or its
	// authorization voided) at its account.
	AttemptExtraReturned AttemptOutcome = "extra_returned"
	// AttemptCharged: its account charged it anyway and no other attempt
	// did: the payment's money is there, and a person decides.
	AttemptCharged AttemptOutcome = "charged"
)
