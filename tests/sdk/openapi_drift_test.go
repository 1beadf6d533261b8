// Package sdk_test holds the Go client's (clients/go) tests that need the
// gateway: its types against api/openapi.json, its webhook verification
// against the gateway's own signer and receiver, and every call against a
// real gateway behind a fault-injecting proxy (tests/gatewaytest), counted
// in the fake PSP's ledger and the database.
package sdk_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	gateway "gateway/clients/go"
)

// sdkTypes is the client's type for every schema of the document.
func sdkTypes() map[string]reflect.Type {
	return map[string]reflect.Type{
		"Payment":                      reflect.TypeFor[gateway.Payment](),
		"PaymentAttempt":               reflect.TypeFor[gateway.PaymentAttempt](),
		"PaymentStatus":                reflect.TypeFor[gateway.PaymentStatus](),
		"CreatePaymentRequest":         reflect.TypeFor[gateway.CreatePaymentRequest](),
		"Problem":                      reflect.TypeFor[gateway.Problem](),
		"ProblemType":                  reflect.TypeFor[string](), // Problem.Type; its values are the Code constants
		"FieldError":                   reflect.TypeFor[gateway.FieldError](),
		"RefundStatus":                 reflect.TypeFor[gateway.RefundStatus](),
		"Refund":                       reflect.TypeFor[gateway.Refund](),
		"CreateRefundRequest":          reflect.TypeFor[gateway.CreateRefundRequest](),
		"PaymentList":                  reflect.TypeFor[gateway.PaymentList](),
		"RefundList":                   reflect.TypeFor[gateway.RefundList](),
		"Checkout":                     reflect.TypeFor[gateway.Checkout](),
		"NextAction":                   reflect.TypeFor[gateway.NextAction](),
		"ConfirmPaymentRequest":        reflect.TypeFor[gateway.ConfirmPaymentRequest](),
		"EventType":                    reflect.TypeFor[gateway.EventType](),
		"Event":                        reflect.TypeFor[gateway.Event](),
		"EventList":                    reflect.TypeFor[gateway.EventList](),
		"WebhookDelivery":              reflect.TypeFor[gateway.WebhookDelivery](),
		"WebhookDeliveryAttempt":       reflect.TypeFor[gateway.WebhookDeliveryAttempt](),
		"WebhookDeliveryList":          reflect.TypeFor[gateway.WebhookDeliveryList](),
		"RedeliverEventRequest":        reflect.TypeFor[gateway.RedeliverEventRequest](),
		"WebhookEndpoint":              reflect.TypeFor[gateway.WebhookEndpoint](),
		"WebhookEndpointList":          reflect.TypeFor[gateway.WebhookEndpointList](),
		"DeletedWebhookEndpoint":       reflect.TypeFor[gateway.DeletedWebhookEndpoint](),
		"CreateWebhookEndpointRequest": reflect.TypeFor[gateway.CreateWebhookEndpointRequest](),
		"RotateWebhookSecretRequest":   reflect.TypeFor[gateway.RotateWebhookSecretRequest](),
		"CapturePaymentRequest":        reflect.TypeFor[gateway.CapturePaymentRequest](),
		"CancelPaymentRequest":         reflect.TypeFor[gateway.CancelPaymentRequest](),
		"CancelByKeyRequest":           reflect.TypeFor[gateway.CancelByKeyRequest](),
		"Cancellation":                 reflect.TypeFor[gateway.Cancellation](),
	}
}

// enumConstants says which of the client's constants spell each enum
// schema's values: their type, and the prefix the document adds.
var enumConstants = map[string]struct{ typeName, prefix string }{
	"PaymentStatus": {"PaymentStatus", ""},
	"RefundStatus":  {"RefundStatus", ""},
	"EventType":     {"EventType", ""},
	"ProblemType":   {"Code", "/problems/"},
}

// allowed lists the differences the client keeps on purpose, each with its
// reason, as "Schema.property". None is needed today: a nullable string is
// "" when null, a nullable time the zero time, which the checks accept.
var allowed = map[string]string{}

// TestOpenAPIDrift fails when api/openapi.json and the client's types
// disagree, either way: another API version; a schema, or a property, that the other lacks; a
// property required in one and optional (omitempty) in the other; another
// JSON type; an enum value without a constant, or a constant the document
// does not list. Money is int64, never a float.
func TestOpenAPIDrift(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info struct {
			Version string `json:"version"`
		} `json:"info"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// The document is the latest version's; the client's types are those
	// of the version it names in every request.
	if doc.Info.Version != gateway.APIVersion {
		t.Errorf("api/openapi.json describes API version %s, the client's types %s (gateway.APIVersion): bring them to %[1]s",
			doc.Info.Version, gateway.APIVersion)
	}
	consts := sdkConstants(t, filepath.Join(root, "clients", "go"))
	d := &drift{t: t, schemas: doc.Components.Schemas, types: sdkTypes(), consts: consts, inlineEnums: map[string]map[string]bool{}}

	var names []string
	for name := range d.schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		typ, ok := d.types[name]
		if !ok {
			t.Errorf("schema %s has no type in the client: add one to clients/go and to sdkTypes", name)
			continue
		}
		schema := d.schemas[name]
		if enum, ok := schema["enum"].([]any); ok {
			ec, ok := enumConstants[name]
			if !ok {
				t.Errorf("enum schema %s: name the client's constants for it in enumConstants", name)
				continue
			}
			var want []string
			for _, v := range enum {
				want = append(want, strings.TrimPrefix(v.(string), ec.prefix))
			}
			d.sameValues(name, ec.typeName, want)
			continue
		}
		d.object(name, schema, typ)
	}
	for name := range d.types {
		if _, ok := d.schemas[name]; !ok {
			t.Errorf("sdkTypes maps %s, which the document no longer has", name)
		}
	}
	// A named type used by properties with an inline enum: its constants
	// are exactly the values those enums list.
	for typeName, values := range d.inlineEnums {
		var want []string
		for v := range values {
			want = append(want, v)
		}
		d.sameValues("the inline enums typed "+typeName, typeName, want)
	}
	// Every struct of the client's types.go is the type of some schema.
	mapped := map[string]bool{}
	for _, typ := range d.types {
		mapped[typ.Name()] = true
	}
	for _, name := range structsOf(t, filepath.Join(root, "clients", "go", "types.go")) {
		if !mapped[name] {
			t.Errorf("clients/go/types.go: %s is the type of no schema of the document", name)
		}
	}
}

type drift struct {
	t           *testing.T
	schemas     map[string]map[string]any
	types       map[string]reflect.Type
	consts      map[string][]string // constants' values by their type's name
	inlineEnums map[string]map[string]bool
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	goName string
	typ    reflect.Type
	omit   bool // omitempty or omitzero
}

func jsonFields(typ reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out[name] = jsonField{goName: f.Name, typ: f.Type, omit: omit}
	}
	return out
}

func (d *drift) object(name string, schema map[string]any, typ reflect.Type) {
	if typ.Kind() != reflect.Struct {
		d.t.Errorf("schema %s is an object; the client's %s is a %s", name, typ, typ.Kind())
		return
	}
	props, _ := schema["properties"].(map[string]any)
	required := map[string]bool{}
	for _, r := range asList(schema["required"]) {
		required[r.(string)] = true
	}
	fields := jsonFields(typ)
	for prop, ps := range props {
		where := name + "." + prop
		if _, ok := allowed[where]; ok {
			continue
		}
		f, ok := fields[prop]
		if !ok {
			d.t.Errorf("%s: the client's %s has no field for it", where, typ.Name())
			continue
		}
		switch {
		case required[prop] && f.omit:
			d.t.Errorf("%s: required in the document, but the client omits %s.%s when empty", where, typ.Name(), f.goName)
		case !required[prop] && !f.omit:
			d.t.Errorf("%s: optional in the document, but the client always sends %s.%s (omitempty or omitzero: never a null)", where, typ.Name(), f.goName)
		}
		d.property(where, prop, ps.(map[string]any), f.typ, required[prop])
	}
	for prop, f := range fields {
		if _, ok := props[prop]; !ok {
			if _, ok := allowed[name+"."+prop]; !ok {
				d.t.Errorf("%s.%s (json %q) is not a property of schema %s", typ.Name(), f.goName, prop, name)
			}
		}
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// property checks one property's schema against its field's type.
func (d *drift) property(where, prop string, ps map[string]any, typ reflect.Type, required bool) {
	if typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64 {
		d.t.Errorf("%s: a float (%s); amounts are int64 minor units, and the API has no floats", where, typ)
		return
	}
	if ref, ok := ps["$ref"].(string); ok {
		d.ref(where, ref, typ)
		return
	}
	if one := asList(ps["oneOf"]); one != nil {
		var refs []string
		nullable := false
		for _, o := range one {
			om := o.(map[string]any)
			if om["type"] == "null" {
				nullable = true
			} else if r, ok := om["$ref"].(string); ok {
				refs = append(refs, r)
			}
		}
		switch {
		case len(refs) == 1 && nullable:
			if typ.Kind() != reflect.Pointer {
				d.t.Errorf("%s: one object or null; the client's %s is no pointer", where, typ)
				return
			}
			d.ref(where, refs[0], typ.Elem())
		case len(refs) > 1 && !nullable:
			if typ != rawType {
				d.t.Errorf("%s: one of several objects; the client's %s should be json.RawMessage, decoded by kind", where, typ)
			}
		default:
			d.t.Errorf("%s: a oneOf this check does not know: teach it", where)
		}
		return
	}
	if c, ok := ps["const"]; ok {
		want := map[string]reflect.Kind{"string": reflect.String, "bool": reflect.Bool}[fmt.Sprintf("%T", c)]
		if typ.Kind() != want {
			d.t.Errorf("%s: const %v; the client's %s", where, c, typ)
		}
		return
	}
	jsonType, nullable := "", false
	switch v := ps["type"].(type) {
	case string:
		jsonType = v
	case []any:
		for _, x := range v {
			if x == "null" {
				nullable = true
			} else {
				jsonType = x.(string)
			}
		}
	}
	if typ.Kind() == reflect.Pointer {
		if required && !nullable {
			d.t.Errorf("%s: a pointer (%s) for a property that is always there", where, typ)
		}
		typ = typ.Elem()
	}
	switch jsonType {
	case "string":
		if ps["format"] == "date-time" {
			if typ != timeType {
				d.t.Errorf("%s: a date-time; the client's %s should be time.Time", where, typ)
			}
			return
		}
		if typ.Kind() != reflect.String {
			d.t.Errorf("%s: a string; the client's %s", where, typ)
			return
		}
		if enum := asList(ps["enum"]); enum != nil && typ != reflect.TypeFor[string]() {
			values := d.inlineEnums[typ.Name()]
			if values == nil {
				values = map[string]bool{}
				d.inlineEnums[typ.Name()] = values
			}
			for _, v := range enum {
				values[v.(string)] = true
			}
		}
	case "integer":
		int64Needed := ps["format"] == "int64" || strings.Contains(prop, "amount") || strings.HasSuffix(prop, "_ms")
		switch {
		case int64Needed && typ.Kind() != reflect.Int64:
			d.t.Errorf("%s: an amount or int64; the client's %s should be int64", where, typ)
		case typ.Kind() != reflect.Int && typ.Kind() != reflect.Int64:
			d.t.Errorf("%s: an integer; the client's %s", where, typ)
		}
	case "boolean":
		if typ.Kind() != reflect.Bool {
			d.t.Errorf("%s: a boolean; the client's %s", where, typ)
		}
	case "array":
		if typ.Kind() != reflect.Slice {
			d.t.Errorf("%s: an array; the client's %s", where, typ)
			return
		}
		if items, ok := ps["items"].(map[string]any); ok {
			d.property(where+"[]", prop, items, typ.Elem(), true)
		}
	case "object":
		add, _ := ps["additionalProperties"].(map[string]any)
		if add == nil || add["type"] != "string" || typ != reflect.TypeFor[map[string]string]() {
			d.t.Errorf("%s: an object of strings; the client's %s should be map[string]string", where, typ)
		}
	default:
		d.t.Errorf("%s: a schema this check does not know (%v): teach it", where, ps)
	}
}

// ref checks a property naming a schema: the client's type of that schema.
func (d *drift) ref(where, ref string, typ reflect.Type) {
	name := ref[strings.LastIndexByte(ref, '/')+1:]
	want, ok := d.types[name]
	if !ok {
		return // reported as a schema without a type
	}
	if typ.Kind() == reflect.Pointer && want.Kind() == reflect.Struct {
		typ = typ.Elem()
	}
	if typ != want {
		d.t.Errorf("%s: schema %s; the client's %s, not its %s", where, name, typ, want)
	}
}

// sameValues compares an enum's values with the constants of typeName.
func (d *drift) sameValues(what, typeName string, want []string) {
	got := slices.Clone(d.consts[typeName])
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var missing, extra []string
		for _, v := range want {
			if !slices.Contains(got, v) {
				missing = append(missing, v)
			}
		}
		for _, v := range got {
			if !slices.Contains(want, v) {
				extra = append(extra, v)
			}
		}
		d.t.Errorf("%s: the document's values without a %s constant: %q; %s constants the document lacks: %q", what, typeName, missing, typeName, extra)
	}
}

// sdkConstants reads the client's typed string constants, by type.
func sdkConstants(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[id.Name] = append(out[id.Name], s)
					}
				}
			}
		}
	}
	return out
}

// structsOf lists the struct types a file declares.
func structsOf(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.StructType); ok && ts.Name.IsExported() {
				out = append(out, ts.Name.Name)
			}
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// repoRoot is the gateway's checkout: two levels above this file.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
