package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	gateway "gateway/clients/go"
)

// Inbox remembers which events were handled, in the same transaction as
// the merchant's own change, so that an event is applied once however
// often it is delivered. Tx is the storage's transaction (*sql.Tx for
// MySQLInbox).
type Inbox[Tx any] interface {
	// Begin opens the transaction an event is handled in.
	Begin(ctx context.Context) (Tx, error)
	// Record claims eventID in tx. It reports false when the event was
	// recorded by a committed transaction already: a redelivery, which is
	// acknowledged without running again. A delivery of the same event
	// handled at the same moment waits for the first to end: then it is
	// false if the first committed, true if it rolled back.
	Record(ctx context.Context, tx Tx, eventID string) (bool, error)
	// Commit makes the claim and the change durable together; Rollback
	// drops both, so that the gateway's next delivery runs again.
	Commit(tx Tx) error
	Rollback(tx Tx) error
}

// HandlerFunc applies an event to the merchant's records within tx. An
// error rolls it all back and answers 500: the gateway delivers the event
// again later (with back-off, for three days). A duplicate is dropped
// before it is called; deliveries of one object's events may still come out
// of order, so compare ev.Seq with the last applied for ev.ObjectID.
type HandlerFunc[Tx any] func(ctx context.Context, tx Tx, ev gateway.Event) error

// Handler is the endpoint a merchant registers with the gateway: it
// verifies each delivery, then hands its event to the merchant's func once,
// through an Inbox. Its answers:
//
//   - 200: the event was applied now, or had been before (a redelivery),
//     or is of a type the handler does not take (WithTypes);
//   - 400: a delivery that does not verify or is not an event (never the
//     gateway's, or signed with a secret not given);
//   - 405, 413: not a POST; a body over 1 MiB;
//   - 500: the func, or the inbox, failed: nothing was kept, and the
//     gateway delivers the event again.
type Handler[Tx any] struct {
	secrets   []string
	inbox     Inbox[Tx]
	fn        HandlerFunc[Tx]
	tolerance time.Duration
	now       func() time.Time
	log       *slog.Logger
	types     []gateway.EventType
}

// maxPayload bounds a delivery's body; an event is a few kilobytes.
const maxPayload = 1 << 20

// HandlerOption configures a Handler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	tolerance time.Duration
	now       func() time.Time
	log       *slog.Logger
	types     []gateway.EventType
}

// WithTypes runs the func for events of these types only: a delivery of
// another type (an endpoint subscribed to more, or to "*") is acknowledged
// without a transaction.
func WithTypes(types ...gateway.EventType) HandlerOption {
	return func(c *handlerConfig) { c.types = append(c.types, types...) }
}

// WithTolerance sets how far a signature's timestamp may be from the
// clock (DefaultTolerance).
func WithTolerance(d time.Duration) HandlerOption {
	return func(c *handlerConfig) { c.tolerance = d }
}

// WithClock sets the clock signatures are judged on (time.Now).
func WithClock(now func() time.Time) HandlerOption {
	return func(c *handlerConfig) { c.now = now }
}

// WithLogger logs the refused and failed deliveries (their event id and
// why; never a secret or a payload); none are logged without it.
func WithLogger(l *slog.Logger) HandlerOption {
	return func(c *handlerConfig) { c.log = l }
}

// NewHandler returns the endpoint for deliveries signed with any of
// secrets (the endpoint's whsec_…; the old and the new one while
// rotating), applying each event with fn through inbox.
func NewHandler[Tx any](secrets []string, inbox Inbox[Tx], fn HandlerFunc[Tx], opts ...HandlerOption) *Handler[Tx] {
	cfg := handlerConfig{tolerance: DefaultTolerance, now: time.Now, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	return &Handler[Tx]{secrets: secrets, inbox: inbox, fn: fn, tolerance: cfg.tolerance, now: cfg.now, log: cfg.log, types: cfg.types}
}

func (h *Handler[Tx]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPayload))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	if err := VerifyAt(payload, r.Header.Get(SignatureHeader), h.secrets, h.tolerance, h.now()); err != nil {
		h.log.Warn("webhook delivery refused", "event", r.Header.Get(EventIDHeader), "err", err)
		http.Error(w, "signature", http.StatusBadRequest)
		return
	}
	ev, err := ParseEvent(payload)
	if err == nil && r.Header.Get(EventIDHeader) != "" && r.Header.Get(EventIDHeader) != ev.ID {
		err = errors.New("webhook: Gateway-Event-Id is not the event's id")
	}
	if err != nil {
		h.log.Warn("webhook delivery refused", "event", r.Header.Get(EventIDHeader), "err", err)
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	if len(h.types) > 0 && !slices.Contains(h.types, ev.Type) {
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := h.apply(r.Context(), ev); err != nil {
		h.log.Error("webhook event not applied", "event", ev.ID, "type", ev.Type, "err", err)
		http.Error(w, "not applied", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// apply runs fn for ev once: claim, change, commit, in one transaction.
func (h *Handler[Tx]) apply(ctx context.Context, ev gateway.Event) (err error) {
	tx, err := h.inbox.Begin(ctx)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			err = errors.Join(err, h.inbox.Rollback(tx))
		}
	}()
	fresh, err := h.inbox.Record(ctx, tx, ev.ID)
	if err != nil || !fresh {
		return err
	}
	if err := h.fn(ctx, tx, ev); err != nil {
		return err
	}
	committed = true
	return h.inbox.Commit(tx)
}
