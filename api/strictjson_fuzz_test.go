package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"gateway/errs"
)

// bodyTypes are the request bodies the handlers decode with decodeRaw.
var bodyTypes = []func() any{
	func() any { return new(createPaymentBody) },
	func() any { return new(createRefundBody) },
	func() any { return new(confirmBody) },
	func() any { return new(createEndpointBody) },
	func() any { return new(rotateBody) },
	func() any { return new(captureBody) },
	func() any { return new(cancelBody) },
	func() any { return new(cancelByKeyBody) },
}

// FuzzStrictJSON: a body decodeRaw accepts means one thing. It is one JSON
// object that says nothing twice and replaces no character (checked
// against encoding/json's own tokenizer, not the strict scanner), it
// decodes with encoding/json alone to the same value, and that value
// re-encoded is accepted again with the same meaning. A refused body is a
// 400 (CodeInvalid) and decodes to nothing.
func FuzzStrictJSON(f *testing.F) {
	for _, seed := range []struct {
		kind uint8
		body string
	}{
		{0, `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "Order \ufffd", "metadata": {"a": "b", "A": "c"}, "confirm": false}`},
		{0, `{"amount": 1, "amount": 2}`},
		{0, `{"Amount": 1}`},
		{0, `{"amount": 1, "AMOUNT": 2}`},
		{0, `{"metadata": {"k": "v", "k": "w"}}`},
		{0, `{"description": "\ud83d\ude00 \ud800 \udc00x"}`},
		{0, `{"description": "\\ud800"}`},
		{0, "{\"description\": \"\xff\"}"},
		{0, `{"amount": 5, "currency": 7}`},
		{0, `{"amount": 5} {"amount": 6}`},
		{0, `null`},
		{1, `{"amount": 500, "reason": "requested_by_customer", "metadata": {"x": "1"}}`},
		{1, `{"reason": "ſ", "ReasoN": "k"}`},
		{2, `{"payment_method": "pm_card_ok", "payment_key": "tgen_1", "amount": 1000, "order_id": "ord_1"}`},
		{3, `{"url": "https://shop.example/hooks", "event_types": ["payment.succeeded", "refund.failed"], "description": "orders"}`},
		{3, `{"url": "https://x", "event_types": [{"a": 1, "a": 2}]}`},
		{4, `{"grace_period_seconds": 3600}`},
		{4, `[]`},
		{4, ``},
		{5, `{"amount_to_capture": 400}`},
		{6, `{"cancellation_reason": "duplicate", "Cancellation_reason": "fraudulent"}`},
		{7, `{"idempotency_key": "order-1", "cancellation_reason": "abandoned"}`},
	} {
		f.Add(seed.kind, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		newBody := bodyTypes[int(kind)%len(bodyTypes)]
		got := newBody()
		err := decodeRaw(raw, got)
		if err != nil {
			if errs.CodeOf(err) != errs.CodeInvalid {
				t.Fatalf("refused with %v, want %s", err, errs.CodeInvalid)
			}
			if !reflect.ValueOf(got).Elem().IsZero() {
				t.Fatalf("refused body %q decoded to %+v (%v)", raw, got, err)
			}
			return
		}
		if why := ambiguity(raw, jsonFields(got)); why != "" {
			t.Fatalf("accepted %q, which %s", raw, why)
		}
		plain := newBody()
		if err := json.Unmarshal(raw, plain); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(got, plain) {
			t.Fatalf("%q: strict decoding %+v, encoding/json %+v", raw, got, plain)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		back := newBody()
		if err := decodeRaw(again, back); err != nil {
			t.Fatalf("%q re-encoded as %s is refused: %v", raw, again, err)
		}
		if !reflect.DeepEqual(got, back) {
			t.Fatalf("%q re-encoded as %s means %+v, not %+v", raw, again, back, got)
		}
	})
}

// ambiguity says what makes raw mean more than one thing, or be other than
// one object of fields, walking it with encoding/json's tokenizer: a key
// said twice in an object (at the top, also in another case), a top key
// that is not exactly a field, invalid UTF-8, or a character replaced by
// U+FFFD in decoding (an escaped lone surrogate). "" when nothing.
func ambiguity(raw []byte, fields []string) string {
	if !utf8.Valid(raw) {
		return "is not UTF-8"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object bool
		key    bool // an object's next token is a key (or its end)
		keys   []string
	}
	var stack []*frame
	done := false // the top value has ended
	valueEnds := func() {
		if len(stack) == 0 {
			done = true
			return
		}
		top := stack[len(stack)-1]
		top.key = top.object
	}
	replaced := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "is not JSON: " + err.Error()
		}
		switch {
		case done:
			return "holds more than one value"
		case len(stack) == 0 && tok != json.Delim('{'):
			return "is not an object"
		}
		if s, ok := tok.(string); ok {
			replaced += strings.Count(s, "\ufffd")
		}
		if len(stack) > 0 && stack[len(stack)-1].key && tok != json.Delim('}') {
			top, key := stack[len(stack)-1], tok.(string)
			for _, k := range top.keys {
				if k == key || len(stack) == 1 && strings.EqualFold(k, key) {
					return "says " + key + " twice"
				}
			}
			if len(stack) == 1 && !slices.Contains(fields, key) {
				return "has " + key + ", not a field"
			}
			top.keys, top.key = append(top.keys, key), false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueEnds()
		default:
			valueEnds()
		}
	}
	if literal := bytes.Count(raw, []byte("\ufffd")) + escapedFFFD(raw); replaced > literal {
		return "decodes a character to U+FFFD (an escaped lone surrogate)"
	}
	return ""
}

// escapedFFFD counts the \ufffd escapes in raw (a backslash escaped
// before "ufffd" is none).
func escapedFFFD(raw []byte) int {
	n := 0
	for i := range raw {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' || !strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			continue
		}
		slashes := 0
		for j := i - 1; j >= 0 && raw[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			n++
		}
	}
	return n
}
