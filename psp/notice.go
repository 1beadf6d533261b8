package psp

import (
	"context"
	"errors"
	"net/http"
)

// Notice is what a PSP's notification (a webhook request) is about, as an
// adapter read it once it had verified the request's signature or fetched
// what the request names from the PSP itself: never the request's own word
// alone. Charges and Refunds are the PSP's records as the adapter read them;
// the gateway checks each against its own record, as it checks a lookup.
type Notice struct {
	// ID and Type are the PSP's names for the notification, for logs.
	ID, Type string
	// Charges are the charges it concerns (one, in practice).
	Charges []Charge
	// Refunds are the refunds it concerns that carry a refund order id.
	Refunds []Refund
	// Skipped says what the notification named that the adapter could not
	// read as a charge or refund of the gateway's (another system's
	// payment, a state it does not know), for logs.
	Skipped []string
}

// NoticeReader reads one PSP's notifications. It must not trust a request
// it cannot verify: it checks the PSP's signature, or fetches the objects
// the request names from the PSP before it believes them.
//
// Errors: ErrUnverified (wrapped) when the request is not provably the
// PSP's or cannot be read: answering it again will not help. An *Error
// (NotProcessed, Unknown) when the PSP could not be asked: the PSP should
// send the notification again later.
type NoticeReader interface {
	ReadNotice(ctx context.Context, header http.Header, body []byte) (Notice, error)
}

// ErrUnverified is wrapped by a NoticeReader's error for a request that
// does not verify (a bad or missing signature, a stale timestamp) or that
// cannot be read as one of the PSP's notifications.
var ErrUnverified = errors.New("psp: notification not verified")
