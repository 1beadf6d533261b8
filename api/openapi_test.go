package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	"gateway/api"
	"gateway/versions"
)

// The published contract (api/openapi.json, OpenAPI 3.1) is checked two ways:
//
//   - TestOpenAPIDocument loads the document the real handler serves at
//     GET /openapi.json, validates it as OpenAPI 3.1 and checks that it and
//     api/routes.go name the same operations;
//   - the e2e harness (harness_test.go) passes every request/response pair the
//     api tests produce through contract.check, which fails the test on any
//     answer the document does not describe.
//
// kin-openapi v0.153.0 handles OpenAPI 3.1 natively: the loader and
// (*openapi3.T).Validate know the 3.1 forms (type arrays, const, if/then,
// propertyNames, $ref siblings), and openapi3filter validates bodies and
// headers of 3.1 documents with a JSON Schema 2020-12 validator
// (santhosh-tekuri/jsonschema). No down-conversion to 3.0 is needed.

// contract is the loaded document with a router over its operations.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// unrouted describes the answers to requests that match no documented
	// operation (unknown path or method): components NotFound and
	// MethodNotAllowed, answered before any authentication.
	unrouted *routers.Route
}

var (
	publishedOnce     sync.Once
	publishedContract *contract
	publishedErr      error
)

// published is the contract of api.OpenAPI, the bytes GET /openapi.json
// serves (TestOpenAPIDocument checks that they are the same), loaded once.
// older holds the contracts of the versions before the latest, by version.
var older sync.Map

// contractOf is the contract of version v.
func contractOf(v versions.Version) (*contract, error) {
	if v == versions.Latest {
		return published()
	}
	if c, ok := older.Load(v); ok {
		return c.(*contract), nil
	}
	doc := api.OpenAPIOf(v)
	if doc == nil {
		return nil, fmt.Errorf("no such version")
	}
	c, err := loadContract(doc)
	if err != nil {
		return nil, err
	}
	older.Store(v, c)
	return c, nil
}

func published() (*contract, error) {
	publishedOnce.Do(func() { publishedContract, publishedErr = loadContract(api.OpenAPI) })
	return publishedContract, publishedErr
}

func loadContract(data []byte) (*contract, error) {
	doc, err := loadDocument(data)
	if err != nil {
		return nil, err
	}
	// The validator's own copy, without the headers every answer carries
	// (checked apart, below).
	checked, err := loadDocument(data)
	if err != nil {
		return nil, err
	}
	stripApart(checked)
	router, err := gorillamux.NewRouter(checked)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	unrouted := openapi3.NewOperation()
	unrouted.Responses = openapi3.NewResponses()
	for status, name := range map[int]string{
		http.StatusNotFound:         "NotFound",
		http.StatusMethodNotAllowed: "MethodNotAllowed",
	} {
		resp := checked.Components.Responses[name]
		if resp == nil {
			return nil, fmt.Errorf("components.responses.%s is missing", name)
		}
		unrouted.Responses.Set(strconv.Itoa(status), resp)
	}
	return &contract{
		doc:      doc,
		router:   router,
		unrouted: &routers.Route{Spec: checked, Operation: unrouted, PathItem: &openapi3.PathItem{}},
	}, nil
}

func loadDocument(data []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi %q: want an OpenAPI 3.1 document", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableMultiError(), openapi3.EnableSchemaFormatValidation()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return doc, nil
}

// apart are the headers every answer carries (TestOpenAPIDocument checks
// that every response declares them, required), checked by their patterns
// here rather than by the validator, which compiles a JSON Schema for each
// header of each answer it checks: most of this package's test time.
var apart = map[string]*regexp.Regexp{
	"X-Request-Id": plainRequestID,
	versions.Header: regexp.MustCompile(`^(` + strings.Join(func() []string {
		out := make([]string, len(versions.All))
		for i, v := range versions.All {
			out[i] = regexp.QuoteMeta(string(v))
		}
		return out
	}(), "|") + `)$`),
}

// stripApart removes the headers of apart from every response of doc.
func stripApart(doc *openapi3.T) {
	strip := func(r *openapi3.ResponseRef) {
		if r != nil && r.Value != nil {
			for name := range apart {
				delete(r.Value.Headers, name)
			}
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				strip(r)
			}
		}
	}
	for _, r := range doc.Components.Responses {
		strip(r)
	}
}

// exchange is one request and the answer the gateway gave to it.
type exchange struct {
	method, target string // target is the request URI: path and query
	reqHeader      http.Header
	reqBody        []byte
	status         int
	header         http.Header
	body           []byte
}

func (x exchange) String() string {
	return fmt.Sprintf("%s %s → %d %s", x.method, x.target, x.status, x.body)
}

// refusals are the answers to a request the document itself forbids: such a
// request (a test's deliberately malformed one) is exempt from request
// validation as long as the gateway refused it.
var refusals = []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
	http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge}

var plainRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// check reports every way in which x departs from the document:
//
//   - the response: its status must be documented for the operation, its
//     documented headers present (when required) and valid, its Content-Type
//     documented, and its body valid against the schema (Payment, Problem with
//     the problem types allowed for that status, ...);
//   - the request: it must conform to the document (security, parameters,
//     headers, body) unless the gateway refused it (400/401/404/405/413); a
//     request the document forbids but the gateway accepted is a finding;
//   - what JSON Schema cannot say: a problem's request_id equals the
//     X-Request-Id header and its instance the request path, a plain
//     X-Request-Id sent by the client is echoed, and a 201's Location names
//     the payment in its body.
func (c *contract) check(x exchange) []string {
	// An answer in an older version is checked against that version's
	// document: the one GET /openapi.json serves for it.
	if v := x.header.Get(versions.Header); v != "" && v != c.doc.Info.Version {
		oc, err := contractOf(versions.Version(v))
		if err != nil {
			return []string{fmt.Sprintf("the answer's %s %q: %v", versions.Header, v, err)}
		}
		return oc.check(x)
	}
	ctx := context.Background()
	var findings []string
	req, err := http.NewRequest(x.method, "http://gateway"+x.target, bytes.NewReader(x.reqBody))
	if err != nil {
		return []string{"cannot rebuild the request: " + err.Error()}
	}
	req.Header = x.reqHeader.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}

	route, params, routeErr := c.router.FindRoute(req)
	reqInput := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:                        true,
			AuthenticationFunc:                bearerAPIKey,
			RejectWhenRequestBodyNotSpecified: true,
		},
	}
	switch {
	case routeErr != nil:
		// Not a documented operation: only the generic answers may come back.
		reqInput.Route, reqInput.PathParams = c.unrouted, nil
		if !slices.Contains(refusals, x.status) {
			findings = append(findings, fmt.Sprintf("undocumented operation (%v) answered %d", routeErr, x.status))
		}
	default:
		if err := openapi3filter.ValidateRequest(ctx, reqInput); err != nil && !slices.Contains(refusals, x.status) {
			findings = append(findings, fmt.Sprintf("the request does not conform to the document, yet the gateway answered %d: %v", x.status, err))
		}
	}

	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 x.status,
		Header:                 x.header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	respInput.SetBodyBytes(x.body)
	if err := openapi3filter.ValidateResponse(ctx, respInput); err != nil {
		findings = append(findings, "response: "+err.Error())
	}
	if ref := reqInput.Route.Operation.Responses.Status(x.status); ref != nil && ref.Value != nil &&
		len(ref.Value.Content) == 0 && len(x.body) > 0 {
		findings = append(findings, fmt.Sprintf("status %d is documented without a body, yet it has one", x.status))
	}

	for _, name := range slices.Sorted(maps.Keys(apart)) {
		switch v := x.header.Get(name); {
		case v == "":
			findings = append(findings, fmt.Sprintf("response: response header %q missing", name))
		case !apart[name].MatchString(v):
			findings = append(findings, fmt.Sprintf("response: response header %q is %q, which its schema refuses", name, v))
		}
	}
	// Cross-field rules of docs/api.md that JSON Schema cannot express.
	rid := x.header.Get("X-Request-Id")
	if sent := x.reqHeader.Get("X-Request-Id"); plainRequestID.MatchString(sent) && rid != sent {
		findings = append(findings, fmt.Sprintf("X-Request-Id %q sent, %q echoed", sent, rid))
	}
	ct := strings.TrimSpace(strings.Split(x.header.Get("Content-Type"), ";")[0])
	switch {
	case ct == "application/problem+json":
		var p struct {
			RequestID string `json:"request_id"`
			Instance  string `json:"instance"`
		}
		if json.Unmarshal(x.body, &p) == nil {
			if p.RequestID != rid {
				findings = append(findings, fmt.Sprintf("problem request_id %q differs from the X-Request-Id header %q", p.RequestID, rid))
			}
			if path, _, _ := strings.Cut(x.target, "?"); p.Instance != path {
				findings = append(findings, fmt.Sprintf("problem instance %q is not the request path %q", p.Instance, path))
			}
		}
	case x.status == http.StatusCreated && ct == "application/json":
		var p struct {
			ID string `json:"id"`
		}
		collection := "/payments/"
		if json.Unmarshal(x.body, &p) == nil && strings.HasPrefix(p.ID, "re_") {
			collection = "/refunds/"
		}
		if strings.HasPrefix(p.ID, "we_") {
			collection = "/webhook_endpoints/"
		}
		if strings.HasPrefix(p.ID, "wd_") {
			collection = "/webhook_deliveries/"
		}
		if p.ID != "" && x.header.Get("Location") != collection+p.ID {
			findings = append(findings, fmt.Sprintf("Location %q does not name the created object %q", x.header.Get("Location"), p.ID))
		}
	}
	return findings
}

// bearerAPIKey is the request validator's view of the security schemes: a
// well-formed bearer secret key (bearerAuth) or publishable key
// (publishableKey), and a client secret header (clientSecret). Whether they
// are valid is the gateway's business (401, 403 and 404 are documented).
func bearerAPIKey(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	header := in.RequestValidationInput.Request.Header
	if in.SecurityScheme.Type == "apiKey" && in.SecurityScheme.In == "header" {
		if header.Get(in.SecurityScheme.Name) == "" {
			return fmt.Errorf("no %s header", in.SecurityScheme.Name)
		}
		return nil
	}
	if in.SecurityScheme.Type != "http" || !strings.EqualFold(in.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %q: only http bearer and header keys are expected", in.SecuritySchemeName)
	}
	prefix := map[string]string{"bearerAuth": "sk_", "publishableKey": "pk_"}[in.SecuritySchemeName]
	scheme, key, ok := strings.Cut(header.Get("Authorization"), " ")
	if prefix == "" || !ok || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(key, prefix) {
		return fmt.Errorf("no Authorization: Bearer %s... header", prefix)
	}
	return nil
}

// capture records what a handler answers, passing everything through.
type capture struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *capture) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *capture) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *capture) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *capture) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checked wraps next so that every exchange it serves is checked against the
// contract; observe receives each exchange with its findings (none when it
// conforms) once the handler has returned.
func (c *contract) checked(next http.Handler, observe func(x exchange, findings []string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			observe(exchange{method: r.Method, target: r.RequestURI}, []string{"reading the request body: " + err.Error()})
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		reqHeader := r.Header.Clone()
		cw := &capture{ResponseWriter: w}
		next.ServeHTTP(cw, r)
		if cw.status == 0 {
			cw.status, cw.header = http.StatusOK, w.Header().Clone()
		}
		x := exchange{method: r.Method, target: r.RequestURI, reqHeader: reqHeader, reqBody: body,
			status: cw.status, header: cw.header, body: cw.body.Bytes()}
		observe(x, c.check(x))
	})
}

// exchangeTally counts checked exchanges by status, for the test log.
type exchangeTally struct {
	mu       sync.Mutex
	byStatus map[int]int
}

func (t *exchangeTally) add(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byStatus == nil {
		t.byStatus = map[int]int{}
	}
	t.byStatus[status]++
}

func (t *exchangeTally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	statuses := slices.Sorted(maps.Keys(t.byStatus))
	parts, n := make([]string, 0, len(statuses)), 0
	for _, s := range statuses {
		parts = append(parts, fmt.Sprintf("%d×%d", t.byStatus[s], s))
		n += t.byStatus[s]
	}
	return fmt.Sprintf("%d exchange(s): %s", n, strings.Join(parts, " "))
}

func reportFindings(t testing.TB, x exchange, findings []string) {
	t.Errorf("OpenAPI contract: %s %s answered %d, which api/openapi.json does not describe:\n  - %s\n  response body: %s",
		x.method, x.target, x.status, strings.Join(findings, "\n  - "), x.body)
}

// TestOpenAPIDocument checks the document the real handler serves: valid
// OpenAPI 3.1, every route of api/routes.go documented and nothing else, and
// the problem types consistent.
func TestOpenAPIDocument(t *testing.T) {
	h := api.NewHandler(nil, nil, nil, api.Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	served := rec.Body.Bytes()
	if !bytes.Equal(served, api.OpenAPI) {
		t.Fatal("GET /openapi.json does not serve api.OpenAPI")
	}
	c, err := loadContract(served)
	if err != nil {
		t.Fatalf("the served document is not valid OpenAPI 3.1: %v", err)
	}
	if c.doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", c.doc.OpenAPI)
	}
	if f := c.check(exchange{method: http.MethodGet, target: "/openapi.json", reqHeader: http.Header{},
		status: rec.Code, header: rec.Header(), body: served}); len(f) > 0 {
		t.Errorf("GET /openapi.json itself: %v", f)
	}

	// Every registered route is documented, and every documented operation is registered.
	e, ok := h.(*echo.Echo)
	if !ok {
		t.Fatalf("api.NewHandler returned %T, not *echo.Echo: cannot list its routes", h)
	}
	param := regexp.MustCompile(`:([A-Za-z_][A-Za-z0-9_]*)`)
	registered := map[string]bool{}
	for _, r := range e.Routes() {
		if !slices.Contains([]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
			http.MethodPatch, http.MethodDelete, http.MethodOptions}, r.Method) {
			continue // echo's own catch-alls (route-not-found handlers of groups)
		}
		path := param.ReplaceAllString(r.Path, "{$1}")
		registered[r.Method+" "+path] = true
		if item := c.doc.Paths.Find(path); item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("route %s %s (api/routes.go) is not documented in api/openapi.json", r.Method, r.Path)
		}
	}
	var documented []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
			if !registered[method+" "+path] {
				t.Errorf("api/openapi.json documents %s %s, which api/routes.go does not register", method, path)
			}
		}
	}
	sort.Strings(documented)
	t.Logf("documented operations: %s", strings.Join(documented, ", "))

	// Every response carries X-Request-Id; every error is a problem whose
	// status matches its key; the ProblemType enum lists exactly the types
	// the responses use.
	enum := map[string]bool{}
	for _, v := range c.doc.Components.Schemas["ProblemType"].Value.Enum {
		enum[v.(string)] = true
	}
	used := map[string]bool{}
	checkResponse := func(where string, status int, resp *openapi3.Response) {
		for name := range apart {
			if h := resp.Headers[name]; h == nil || !h.Value.Required {
				t.Errorf("%s: %s is not a required response header", where, name)
			}
		}
		if status < 400 || status == http.StatusPaymentRequired { // 402 is a declined or failed payment
			return
		}
		mt := resp.Content.Get("application/problem+json")
		if mt == nil || len(resp.Content) != 1 {
			t.Errorf("%s: an error must be application/problem+json only", where)
			return
		}
		types, statusConst := problemConstraint(mt.Schema.Value)
		if statusConst != status {
			t.Errorf("%s: problem status const %d", where, statusConst)
		}
		if len(types) == 0 {
			t.Errorf("%s: the problem types of this status are not listed", where)
		}
		for _, ty := range types {
			used[ty] = true
			if !enum[ty] {
				t.Errorf("%s: problem type %s is not in the ProblemType enum", where, ty)
			}
		}
	}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, ref := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s %s: response %q: use explicit statuses", method, path, code)
					continue
				}
				checkResponse(method+" "+path+" "+code, status, ref.Value)
			}
		}
	}
	for name, ref := range c.doc.Components.Responses {
		status := map[string]int{"NotFound": 404, "MethodNotAllowed": 405}[name]
		checkResponse("components.responses."+name, status, ref.Value)
	}
	for ty := range enum {
		if !used[ty] {
			t.Errorf("problem type %s is in the enum but no response can carry it", ty)
		}
	}

	// The status table of docs/api.md names problem types: each must be documented.
	if readme, err := os.ReadFile("../docs/api.md"); err == nil {
		for _, m := range regexp.MustCompile("\\b([45][0-9][0-9]) `([a-z-]+)`").FindAllStringSubmatch(string(readme), -1) {
			if !enum["/problems/"+m[2]] {
				t.Errorf("docs/api.md's %s %s is not a documented problem type", m[1], m[2])
			}
		}
	}
}

// problemConstraint reads the {"allOf": [Problem, {properties: {type, status}}]}
// shape of a documented problem response: its allowed types and status.
func problemConstraint(s *openapi3.Schema) (types []string, status int) {
	for _, sub := range s.AllOf {
		props := sub.Value.Properties
		if ty := props["type"]; ty != nil {
			if ty.Value.Const != nil {
				types = append(types, ty.Value.Const.(string))
			}
			for _, v := range ty.Value.Enum {
				types = append(types, v.(string))
			}
		}
		if st := props["status"]; st != nil && st.Value.Const != nil {
			if f, ok := st.Value.Const.(float64); ok {
				status = int(f)
			}
		}
	}
	return types, status
}

// TestOpenAPICheckCatchesDrift shows that contract.check is no rubber stamp:
// each altered answer below is reported.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	c, err := published()
	if err != nil {
		t.Fatal(err)
	}
	const payment = `{"id":"pay_01KB4ZQ4C9V8X2M3N5P7R9T1W3","status":"succeeded","amount":1000,"currency":"KRW",` +
		`"payment_method":"pm_card_ok","merchant_order_id":"ord_4756245f0980251a38000acc","psp_reference":"ch_1",` +
		`"decline_code":null,"description":"","metadata":{},"amount_refunded":0,"refunded":false,"created_at":"2026-11-30T12:00:00Z"}`
	post := func() http.Header {
		return http.Header{"Authorization": {"Bearer sk_abcdefghijkl"}, "Idempotency-Key": {"k"},
			"Content-Type": {"application/json"}}
	}
	created := func() http.Header {
		return http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"},
			"Location": {"/payments/pay_01KB4ZQ4C9V8X2M3N5P7R9T1W3"}, "Gateway-Version": {"2026-12-02"}}
	}
	problemHdr := func() http.Header {
		return http.Header{"Content-Type": {"application/problem+json"}, "X-Request-Id": {"req_1"}, "Gateway-Version": {"2026-12-02"}}
	}
	reqBody := []byte(`{"amount":1000,"currency":"KRW","payment_method":"pm_card_ok"}`)
	base := exchange{method: http.MethodPost, target: "/payments", reqHeader: post(), reqBody: reqBody,
		status: http.StatusCreated, header: created(), body: []byte(payment)}
	if f := c.check(base); len(f) > 0 {
		t.Fatalf("a conforming 201 was reported: %v", f)
	}
	refused := base
	refused.reqHeader = post()
	refused.reqHeader.Del("Idempotency-Key")
	refused.status, refused.header = http.StatusBadRequest, problemHdr()
	refused.body = []byte(`{"type":"/problems/invalid-idempotency-key","title":"t","status":400,"instance":"/payments","request_id":"req_1"}`)
	if f := c.check(refused); len(f) > 0 {
		t.Fatalf("a malformed request refused with 400 was reported: %v", f)
	}

	with := func(mod func(x *exchange)) exchange {
		x := base
		x.reqHeader, x.header = post(), created()
		mod(&x)
		return x
	}
	for name, x := range map[string]exchange{
		"undocumented status": with(func(x *exchange) { x.status = http.StatusTeapot }),
		"missing Location":    with(func(x *exchange) { x.header.Del("Location") }),
		"wrong Location":      with(func(x *exchange) { x.header.Set("Location", "/payments/pay_01KB4ZQ4C9V8X2M3N5P7R9T1W4") }),
		"no X-Request-Id":     with(func(x *exchange) { x.header.Del("X-Request-Id") }),
		"unknown field":       with(func(x *exchange) { x.body = []byte(strings.Replace(payment, `"amount"`, `"fee":1,"amount"`, 1)) }),
		"missing field":       with(func(x *exchange) { x.body = []byte(strings.Replace(payment, `"decline_code":null,`, "", 1)) }),
		"wrong type":          with(func(x *exchange) { x.body = []byte(strings.Replace(payment, `"ch_1"`, `1`, 1)) }),
		"201 not succeeded":   with(func(x *exchange) { x.body = []byte(strings.Replace(payment, `"succeeded"`, `"declined"`, 1)) }),
		"not JSON":            with(func(x *exchange) { x.header.Set("Content-Type", "text/plain") }),
		"accepted a request the document forbids": with(func(x *exchange) { x.reqHeader.Set("Idempotency-Key", "clé") }),
		"problem type not allowed for the status": with(func(x *exchange) {
			x.status, x.header = http.StatusConflict, problemHdr()
			x.body = []byte(`{"type":"/problems/not-found","title":"t","status":409,"instance":"/payments","request_id":"req_1"}`)
		}),
		"key reused without payment_id": with(func(x *exchange) {
			x.status, x.header = http.StatusConflict, problemHdr()
			x.body = []byte(`{"type":"/problems/idempotency-key-reused","title":"t","status":409,"instance":"/payments","request_id":"req_1"}`)
		}),
		"problem status differs": with(func(x *exchange) {
			x.status, x.header = http.StatusUnprocessableEntity, problemHdr()
			x.body = []byte(`{"type":"/problems/idempotency-key-mismatch","title":"t","status":400,"instance":"/payments","request_id":"req_1"}`)
		}),
		"request_id differs from the header": with(func(x *exchange) {
			x.status, x.header = http.StatusUnprocessableEntity, problemHdr()
			x.body = []byte(`{"type":"/problems/idempotency-key-mismatch","title":"t","status":422,"instance":"/payments","request_id":"req_2"}`)
		}),
		"502 without Retry-After": with(func(x *exchange) {
			x.status, x.header = http.StatusBadGateway, problemHdr()
			x.body = []byte(`{"type":"/problems/psp-outcome-unknown","title":"t","status":502,"instance":"/payments","request_id":"req_1"}`)
		}),
		"unknown path answered 200": with(func(x *exchange) { x.method, x.target = http.MethodGet, "/nowhere"; x.status = http.StatusOK }),
	} {
		if f := c.check(x); len(f) == 0 {
			t.Errorf("%s: not reported (%s)", name, x)
		} else {
			first, _, _ := strings.Cut(f[0], "\n")
			t.Logf("%s: reported: %s", name, first)
		}
	}
}

// Requests for no documented operation get the generic answers the document
// describes under components.responses (the harness checks their bodies).
func TestOpenAPIUnroutedRequests(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		method, path string
		withKey      bool
		want         []int
	}{
		{http.MethodGet, "/nowhere", false, []int{http.StatusNotFound}},
		{http.MethodGet, "/nowhere", true, []int{http.StatusNotFound}},
		{http.MethodDelete, "/payments", false, []int{http.StatusMethodNotAllowed}},
		{http.MethodDelete, "/payments", true, []int{http.StatusMethodNotAllowed}},
		{http.MethodPut, "/healthz", false, []int{http.StatusMethodNotAllowed}},
		{http.MethodPost, "/openapi.json", true, []int{http.StatusMethodNotAllowed}},
		// Below a payment there is no route: not "payment not found".
		{http.MethodGet, "/payments/pay_x/anything", true, []int{http.StatusNotFound}},
		{http.MethodGet, "/payments/pay_x/anything", false, []int{http.StatusNotFound}},
		{http.MethodGet, "/payments/pay_x/", true, []int{http.StatusNotFound}},
		{http.MethodPost, "/payments/pay_x/refunds/x", true, []int{http.StatusNotFound}},
		{http.MethodGet, "/refunds/re_x/anything", true, []int{http.StatusNotFound}},
		{http.MethodGet, "/metrics", false, []int{http.StatusNotFound}},
		// A sub-route of a payment asked with another method: 405, as elsewhere.
		{http.MethodDelete, "/payments/pay_x/confirm", true, []int{http.StatusMethodNotAllowed}},
		{http.MethodPut, "/payments/pay_x/refunds", false, []int{http.StatusMethodNotAllowed}},
	} {
		key := ""
		if tc.withKey {
			key = e.apiKey
		}
		res, err := e.do(context.Background(), tc.method, tc.path, key, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tc.want, res.status) {
			t.Errorf("%s %s (API key: %v): %d, want one of %v", tc.method, tc.path, tc.withKey, res.status, tc.want)
		}
		// An unknown route has no detail; "payment not found" would mean a handler ran.
		if res.status == http.StatusNotFound && strings.Contains(string(res.body), `"detail"`) {
			t.Errorf("%s %s: %s, want the route's 404 without detail", tc.method, tc.path, res.body)
		}
		if res.status == http.StatusMethodNotAllowed && res.header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
	}
}
