package payments

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
	"gateway/routing"
)

// Limits on a payment request.
const (
	MaxAmountMinor      = 1_000_000_000_000 // far above any card charge; a typo guard, not a business rule
	MaxPaymentMethodLen = 255
	MaxDescriptionLen   = 1000
	MaxMetadataKeys     = 20
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
	// MaxTextBytes bounds the text a request carries (payment method,
	// description, reason, metadata keys and values) in UTF-8 bytes, all
	// together: it bounds the answer stored for its key (the text is stored
	// once in it, without HTML escaping), which the character limits alone
	// let reach about 47 KB.
	MaxTextBytes = 16 << 10
)

// EndpointCreatePayment scopes the idempotency keys of POST /payments.
const EndpointCreatePayment = "POST /payments"

// CreateRequest is the normalized command behind POST /payments.
type CreateRequest struct {
	MerchantID     string
	IdempotencyKey string
	Amount         Money
	PaymentMethod  string
	Description    string
	Metadata       map[string]string
	// ConfirmLater creates the payment without charging it (two-step
	// checkout: "confirm": false): POST /payments/{id}/confirm charges it.
	// PaymentMethod may then be left empty and given to the confirm.
	ConfirmLater bool
	// CaptureMethod is CaptureAutomatic when empty; CaptureManual only
	// authorizes the payment (requires_capture), for a PSP that can.
	CaptureMethod CaptureMethod
	// BodyDigest is the SHA-256 of the request's body as received, when the
	// caller has it (zero otherwise). Not part of the command: it lets
	// ReplayBody answer the same bytes again without parsing them.
	BodyDigest [32]byte
}

// Normalize makes equal commands equal field by field (currency codes are
// case-insensitive on input, upper case from here on).
func (r *CreateRequest) Normalize() {
	// ASCII only: Unicode case folding would turn "uſd" into "USD".
	b := []byte(r.Amount.Currency)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	r.Amount.Currency = string(b)
}

// Validate reports every invalid field at once, as a errs.CodeInvalid *errs.Error.
func (r CreateRequest) Validate() error {
	var fields []errs.FieldError
	add := func(field, format string, args ...any) {
		fields = append(fields, errs.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	switch {
	case r.Amount.Minor <= 0:
		add("amount", "must be a positive integer in minor units")
	case r.Amount.Minor > MaxAmountMinor:
		add("amount", "must not exceed %d", int64(MaxAmountMinor))
	}
	if _, ok := CurrencyExponent(r.Amount.Currency); !ok {
		add("currency", "must be an ISO 4217 currency code such as USD or KRW")
	}
	switch {
	case r.PaymentMethod == "" && !r.ConfirmLater:
		add("payment_method", "is required (or create the payment with \"confirm\": false and give it to the confirm)")
	case utf8.RuneCountInString(r.PaymentMethod) > MaxPaymentMethodLen || !printable(r.PaymentMethod):
		add("payment_method", "must be at most %d printable characters", MaxPaymentMethodLen)
	}
	if utf8.RuneCountInString(r.Description) > MaxDescriptionLen || !printable(r.Description) {
		add("description", "must be at most %d printable characters", MaxDescriptionLen)
	}
	switch r.CaptureMethod {
	case "", CaptureAutomatic, CaptureManual:
	default:
		add("capture_method", "must be automatic or manual")
	}
	fields = append(fields, validateMetadata(r.Metadata)...)
	fields = append(fields, validateTextBytes(r.Metadata, r.PaymentMethod, r.Description)...)
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: fields}
	}
	return nil
}

// validateMetadata checks a request's metadata: the same rules for every
// object that carries some.
func validateMetadata(md map[string]string) []errs.FieldError {
	var fields []errs.FieldError
	add := func(field, format string, args ...any) {
		fields = append(fields, errs.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(md) > MaxMetadataKeys {
		add("metadata", "must have at most %d keys", MaxMetadataKeys)
	}
	for _, k := range sortedKeys(md) {
		v := md[k]
		switch {
		case k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen || !printable(k):
			add("metadata", "key %q must be 1 to %d printable characters", k, MaxMetadataKeyLen)
		case utf8.RuneCountInString(v) > MaxMetadataValueLen || !printable(v):
			add("metadata."+k, "must be at most %d printable characters", MaxMetadataValueLen)
		}
	}
	return fields
}

// validateTextBytes checks the text of a request against MaxTextBytes.
func validateTextBytes(md map[string]string, texts ...string) []errs.FieldError {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	for k, v := range md {
		n += len(k) + len(v)
	}
	if n > MaxTextBytes {
		return []errs.FieldError{{Field: "metadata", Reason: fmt.Sprintf(
			"together with the other text fields holds %d bytes of UTF-8; at most %d are stored", n, MaxTextBytes)}}
	}
	return nil
}

// Fingerprint identifies the command, not its bytes: a client that sends the
// same request with other key order or whitespace gets a replay, not a 422.
func (r CreateRequest) Fingerprint() [32]byte {
	version := "v1"
	if r.ConfirmLater {
		// A payment to confirm later is another command than a charge now.
		version = "v1-confirm-later"
	}
	if r.CaptureMethod == CaptureManual {
		// Authorizing only is another command than charging.
		version += "-manual"
	}
	fields := []string{
		version, strconv.FormatInt(r.Amount.Minor, 10), r.Amount.Currency, r.PaymentMethod, r.Description,
	}
	for _, k := range sortedKeys(r.Metadata) {
		fields = append(fields, k, r.Metadata[k])
	}
	return idemkeys.Fingerprint(fields...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// printable refuses invalid UTF-8 and control characters, which have no
// business in a description and break logs and PSP requests.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Create charges the customer for req at most once per (merchant, key),
// whatever number of times it is called and from however many replicas.
//
// ctx is the client's: when it ends, waiting for a duplicate and paced
// replays end too, but a payment this request claimed is finished anyway
// while its worker holds the lease, so that the client's retry finds a
// stored answer.
//
// Errors are *errs.Error: CodeInvalidKey and CodeInvalid (nothing stored),
// CodeKeyMismatch (the key was used for another request), CodeInFlight (the
// key is being processed; retry later), CodeKeyReused, CodePSPUnavailable and
// CodePSPUnknown (retry with the same key), CodeUnavailable, CodeInternal.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	req.Normalize()
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	if _, err := s.psps.Candidates(routeOf(Payment{MerchantID: req.MerchantID, IdempotencyKey: req.IdempotencyKey,
		Amount: req.Amount, PaymentMethod: req.PaymentMethod}), req.CaptureMethod == CaptureManual); err != nil {
		return Outcome{}, routing.CannotAccept(err)
	}
	ref := idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreatePayment, Key: req.IdempotencyKey}
	return s.run(ctx, ref, req.Fingerprint(), req.BodyDigest, func(ctx context.Context, token idemkeys.Token) (subject, *idemkeys.Response, error) {
		p := newPayment(req, Processing, "")
		name, err := s.route(ctx, ref, p)
		if err != nil {
			return paymentSubject{p: p}, nil, err
		}
		adapter, _ := s.psps.For(name)
		if req.ConfirmLater {
			return s.claimUnconfirmed(ctx, ref, req, token, name, adapter)
		}
		p.PSP = name
		now, err := s.store.Now(ctx)
		if err != nil {
			return paymentSubject{p: p}, nil, err
		}
		c := NewClaim(ref, req.Fingerprint(), token, s.cfg.Lease, p, now)
		return paymentSubject{p: c.Payment}, nil, s.store.Claim(ctx, c)
	})
}

// claimUnconfirmed stores a payment to confirm later (two-step checkout)
// and completes its key at once with the answer: no PSP is called.
func (s *Service) claimUnconfirmed(ctx context.Context, ref idemkeys.Ref, req CreateRequest, token idemkeys.Token, name string, adapter psp.Adapter) (subject, *idemkeys.Response, error) {
	p := newPayment(req, RequiresConfirmation, name)
	sub := paymentSubject{p: p}
	checkout, err := CheckoutFor(p, adapter.Capabilities())
	if err != nil {
		return sub, nil, err
	}
	if p.ClientSecret, p.ClientSecretHash, err = newClientSecret(p.ID); err != nil {
		return sub, nil, err
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return sub, nil, err
	}
	p.ExpiresAt = now.Add(s.cfg.ConfirmExpiry).Truncate(time.Microsecond)
	c := NewClaim(ref, req.Fingerprint(), token, s.cfg.Lease, p, now)
	shown := c.Payment
	shown.Checkout = checkout
	resp := Render(shown)
	c.Answer = &resp
	return paymentSubject{p: c.Payment}, &resp, s.store.Claim(ctx, c)
}

// newPayment is the payment req creates at the PSP named psp.
func newPayment(req CreateRequest, status Status, psp string) Payment {
	return Payment{
		ID:              "pay_" + ulid.Make().String(),
		MerchantID:      req.MerchantID,
		IdempotencyKey:  req.IdempotencyKey,
		MerchantOrderID: MerchantOrderID(req.MerchantID, req.IdempotencyKey),
		Status:          status,
		Amount:          req.Amount,
		PaymentMethod:   req.PaymentMethod,
		Description:     req.Description,
		Metadata:        req.Metadata,
		PSP:             psp,
		CaptureMethod:   captureMethod(req.CaptureMethod),
	}
}

func captureMethod(m CaptureMethod) CaptureMethod {
	if m == "" {
		return CaptureAutomatic
	}
	return m
}
