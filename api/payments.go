package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/merchants"
	"gateway/payments"
	"gateway/versions"
)

const merchantKey = "merchant"

// authenticate resolves the bearer API key to a merchant.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.checkAuthFailures(c); err != nil {
			return err
		}
		h := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, key, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
			return s.countAuthFailure(c, &errs.Error{Code: errs.CodeUnauthorized, Message: "send the API key as Authorization: Bearer <api_key>"})
		}
		key = strings.TrimSpace(key)
		if ca, ok := s.auth.(cachedAuthenticator); ok {
			if m, ok := ca.Cached(key); ok {
				if err := setMerchant(c, m); err != nil {
					return err
				}
				return next(c)
			}
		}
		ctx, cancel := s.lookupCtx(c)
		m, err := s.auth.Authenticate(ctx, key)
		cancel()
		if err != nil {
			return s.countAuthFailure(c, err)
		}
		if err := setMerchant(c, m); err != nil {
			return err
		}
		return next(c)
	}
}

// rateLimit refuses a merchant's request beyond its token bucket, before
// anything is read or stored.
func (s *Server) rateLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ok, wait := s.limits.allow(merchantOf(c).ID, s.opts.Now())
		if !ok {
			s.obs.RateLimited()
			return &errs.Error{Code: codeRateLimited, Message: "too many requests for this merchant; retry after the Retry-After delay", RetryAfter: wait}
		}
		return next(c)
	}
}

func merchantOf(c echo.Context) merchants.Merchant {
	m, _ := c.Get(merchantKey).(merchants.Merchant)
	return m
}

// createPaymentBody is the POST /payments body. Pointers tell a missing
// field from a zero one (a field is never null: strictJSON refuses it, and
// omitzero writes a missing one back as missing).
type createPaymentBody struct {
	Amount        *int64            `json:"amount,omitzero"`
	Currency      *string           `json:"currency,omitzero"`
	PaymentMethod *string           `json:"payment_method,omitzero"`
	Description   *string           `json:"description,omitzero"`
	Metadata      map[string]string `json:"metadata,omitzero"`
	// Confirm false creates the payment without charging it (two-step
	// checkout; see confirm.go); absent or true charges it now.
	Confirm *bool `json:"confirm,omitzero"`
	// CaptureMethod "manual" only authorizes the payment (captures.go);
	// absent or "automatic" takes the money at once.
	CaptureMethod *string `json:"capture_method,omitzero"`
}

func (s *Server) handleCreatePayment(c echo.Context) error {
	key, err := s.idempotencyKey(c, "a UUID is a good choice")
	if err != nil {
		return err
	}
	raw, err := s.readJSONBody(c)
	if err != nil {
		return err
	}
	// A replay of bytes this process answered already is answered from its
	// cache, unparsed (authenticated and paced all the same).
	digest := sha256.Sum256(raw)
	if out, ok := s.svc.ReplayBody(c.Request().Context(), merchantOf(c).ID, key, digest); ok {
		return answer(c, out)
	}
	req, err := s.parseCreate(c, key, raw)
	if err != nil {
		return err
	}
	req.BodyDigest = digest
	// The client's context: a wait ends when the client goes away, while a
	// payment already claimed is finished anyway (the flow detaches it).
	out, err := s.svc.Create(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return answer(c, out)
}

// answer writes an idempotent command's answer: its stored status and body,
// byte for byte, with Location for a created payment and
// Idempotent-Replayed for a replay.
func answer(c echo.Context, out payments.Outcome) error {
	body, err := storedAnswer(c, versions.KindPayment, out)
	if err != nil {
		return err
	}
	// A creation's answer may hold the payment's client secret.
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	if out.Response.Status == http.StatusCreated {
		c.Response().Header().Set(echo.HeaderLocation, "/payments/"+out.SubjectID)
	}
	if out.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if c.Path() == "/payments" {
		noteOf(c).paymentID = out.SubjectID
	}
	return c.Blob(out.Response.Status, echo.MIMEApplicationJSON, body)
}

// idempotencyKey reads the key of the request's one Idempotency-Key field,
// bare or a quoted Structured Field String (idemkey.go); its validity is
// the flow's to judge. hint ends the refusal's advice.
func (s *Server) idempotencyKey(c echo.Context, hint string) (string, error) {
	fields, present := c.Request().Header["Idempotency-Key"]
	if !present || len(fields) != 1 {
		if !present {
			s.obs.MissingKey()
		}
		return "", &errs.Error{Code: errs.CodeInvalidKey, Message: "send exactly one Idempotency-Key header, 1 to 255 visible ASCII characters (" + hint + ")"}
	}
	key, err := keyOfField(fields[0])
	if err != nil {
		return "", &errs.Error{Code: errs.CodeInvalidKey, Message: "invalid Idempotency-Key: " + err.Error() +
			`; send the key bare (8e03978e-…) or as a Structured Field string ("8e03978e-…")`}
	}
	return key, nil
}

// parseCreate turns the request into the command, or a 4xx *errs.Error
// (or *http.MaxBytesError) naming what to fix. It reads no state.
func (s *Server) parseCreate(c echo.Context, key string, raw []byte) (payments.CreateRequest, error) {
	var body createPaymentBody
	if err := decodeRaw(raw, &body); err != nil {
		return payments.CreateRequest{}, err
	}
	req := payments.CreateRequest{
		MerchantID:     merchantOf(c).ID,
		IdempotencyKey: key,
		Metadata:       body.Metadata,
		ConfirmLater:   body.Confirm != nil && !*body.Confirm,
	}
	var missing []errs.FieldError
	if body.Amount == nil {
		missing = append(missing, errs.FieldError{Field: "amount", Reason: "is required"})
	} else {
		req.Amount.Minor = *body.Amount
	}
	if body.Currency == nil {
		missing = append(missing, errs.FieldError{Field: "currency", Reason: "is required"})
	} else {
		req.Amount.Currency = *body.Currency
	}
	if body.PaymentMethod == nil && !req.ConfirmLater {
		missing = append(missing, errs.FieldError{Field: "payment_method", Reason: "is required"})
	} else if body.PaymentMethod != nil {
		req.PaymentMethod = *body.PaymentMethod
	}
	if body.Description != nil {
		req.Description = *body.Description
	}
	if body.CaptureMethod != nil {
		req.CaptureMethod = payments.CaptureMethod(*body.CaptureMethod)
	}
	if len(missing) > 0 {
		return req, &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: missing}
	}
	return req, nil
}

// decodeBody reads one JSON object into body, refusing unknown fields,
// keys said twice or in another case, invalid UTF-8, trailing data and
// bodies over the limit: every request body is read so.
func (s *Server) decodeBody(c echo.Context, body any) error {
	raw, err := s.readJSONBody(c)
	if err != nil {
		return err
	}
	return decodeRaw(raw, body)
}

// readJSONBody reads a JSON request's body, refusing other media types and
// bodies over the limit or unreadable.
func (s *Server) readJSONBody(c echo.Context) ([]byte, error) {
	if ct := c.Request().Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, &errs.Error{Code: errs.CodeInvalid, Message: "the request body must be application/json"}
		}
	}
	raw, err := readBody(c, s.opts.MaxBodyBytes)
	if err != nil {
		return nil, err // *http.MaxBytesError → 413, *bodyUnreadable → 400
	}
	return raw, nil
}

// decodeRaw reads one JSON object from raw into body. A refused body
// leaves body zero: no caller can act on the half decoded before the
// decoder found what was wrong.
func decodeRaw(raw []byte, body any) (err error) {
	defer func() {
		if err != nil {
			reflect.ValueOf(body).Elem().SetZero()
		}
	}()
	if err := strictJSON(raw, body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		return invalidJSON(err)
	}
	if dec.More() {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body must hold exactly one JSON object"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body must hold exactly one JSON object"}
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body must be a JSON object"}
	}
	return nil
}

// invalidJSON explains a decoding failure without echoing the body.
func invalidJSON(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	e := &errs.Error{Code: errs.CodeInvalid, Message: "the request body is not valid JSON"}
	switch {
	case errors.As(err, &syn):
		e.Message = fmt.Sprintf("the request body is not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			e.Message = "the request body must be a JSON object"
		} else {
			e.Fields = []errs.FieldError{{Field: typ.Field, Reason: "must be " + jsonKind(typ.Type.Kind().String())}}
			e.Message = "the request body is invalid"
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		e.Message = "the request body is empty or truncated; send a JSON object"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		e.Fields = []errs.FieldError{{Field: field, Reason: "is not a known field"}}
		e.Message = "the request body is invalid"
	}
	return e
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int64":
		return "an integer (minor units)"
	case "string":
		return "a string"
	case "map":
		return "an object of string values"
	case "bool":
		return "true or false"
	case "ptr":
		return "a value of the documented type"
	}
	return "of the documented type"
}

func (s *Server) handleGetPayment(c echo.Context) error {
	p, err := s.svc.Payment(c.Request().Context(), merchantOf(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	v := payments.ToView(p)
	if fromBrowser(c) {
		v = browserView(v) // browserview.go
	}
	return renderJSON(c, http.StatusOK, versions.KindPayment, v)
}

// handleFindPayment answers GET /payments: the payment an idempotency key
// created (with ?idempotency_key=), or else a page of the merchant's payments.
func (s *Server) handleFindPayment(c echo.Context) error {
	q := c.QueryParams()
	keys, ok := q["idempotency_key"]
	if !ok {
		return s.handleListPayments(c)
	}
	if len(keys) != 1 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "pass exactly one idempotency_key query parameter to find the payment it created"}
	}
	p, err := s.svc.PaymentByKey(c.Request().Context(), merchantOf(c).ID, keys[0])
	if err != nil {
		return err
	}
	return renderJSON(c, http.StatusOK, versions.KindPayment, payments.ToView(p))
}

func (s *Server) handleHealthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReadyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		var pe *errs.Error
		if errors.As(err, &pe) {
			return pe // says why this replica is not ready
		}
		return &errs.Error{Code: errs.CodeUnavailable, Message: "the database does not answer", Err: err}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
