package payments

import (
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"

	"gateway/errs"
	"gateway/idemkeys"
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
