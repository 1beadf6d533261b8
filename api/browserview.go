package api

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/labstack/echo/v4"

	"gateway/merchants"
	"gateway/payments"
)

// A customer's browser reads a payment as Stripe lets a publishable key
// read a PaymentIntent: all it needs to pay (the amount, the status, the
// description it shows, the next action with the PSP's client secret),
// but not the merchant's metadata, which holds what the merchant keeps for
// itself (customer ids, internal references) and stays on its server.
// Answers to a publishable key, GET /payments/{id} and the confirm's (its
// replays too), carry metadata empty; the merchant's server, with the
// secret key, reads everything.

// fromBrowser reports whether the request came with a publishable key.
func fromBrowser(c echo.Context) bool {
	return strings.HasPrefix(bearerKey(c), merchants.PublishableKeyPrefix)
}

// browserView is v as a browser reads it.
func browserView(v payments.View) payments.View {
	v.Metadata = map[string]string{}
	return v
}

// browserAnswer is a stored answer (a payment, as payments.Render wrote
// it) as a browser gets it: the same bytes but for metadata, so that every
// replay to a browser is byte for byte the first.
func browserAnswer(body []byte) ([]byte, error) {
	var v payments.View
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	if len(v.Metadata) == 0 {
		return body, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as payments.Render
	if err := enc.Encode(browserView(v)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
