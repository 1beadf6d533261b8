package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

const (
	docPath = "../../../api/openapi.json"
	dtsPath = "../gateway.d.ts"
)

// problems lists every way gateway.d.ts is not what the document gives:
// a generated declaration that drifted (by schema and property), a
// section in another order or layout, a hand-written type naming what the
// document does not have.
func problems(doc []byte, dts string) []string {
	want, err := declarations(doc)
	if err != nil {
		return []string{"api/openapi.json: " + err.Error()}
	}
	f, err := splitFile(dts)
	if err != nil {
		return []string{"gateway.d.ts: " + err.Error()}
	}
	have, err := parse(f.section)
	if err != nil {
		return []string{"gateway.d.ts: " + err.Error()}
	}
	out := drift(want, have)
	if len(out) == 0 && render(want) != f.section {
		out = append(out, "gateway.d.ts: the generated section's declarations are the document's, in another order or layout")
	}
	return append(out, checkHandWritten(f.before+f.after, want)...)
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The declarations of the API's objects in the client's types are the
// OpenAPI document's schemas, exactly.
func TestDeclarationsFollowTheDocument(t *testing.T) {
	if ps := problems(mustRead(t, docPath), string(mustRead(t, dtsPath))); len(ps) > 0 {
		t.Fatalf("clients/js/gateway.d.ts has drifted from api/openapi.json:\n  %s\nrun `go generate ./clients/js`, then fix the hand-written types it names",
			strings.Join(ps, "\n  "))
	}
}

// Each way the document or the declarations can move apart is caught, and
// named by its schema and property.
func TestDriftIsNamed(t *testing.T) {
	doc := mustRead(t, docPath)
	dts := string(mustRead(t, dtsPath))
	schemas := func(d map[string]any) map[string]any {
		return d["components"].(map[string]any)["schemas"].(map[string]any)
	}
	props := func(d map[string]any, name string) map[string]any {
		return schemas(d)[name].(map[string]any)["properties"].(map[string]any)
	}
	for _, tc := range []struct {
		name string
		doc  func(d map[string]any)
		dts  func(s string) string
		want string
	}{
		{
			name: "property added to the document",
			doc: func(d map[string]any) {
				props(d, "Payment")["surcharge"] = map[string]any{"type": "integer"}
			},
			want: "Payment.surcharge: a property in api/openapi.json, missing from gateway.d.ts (want `surcharge?: number;`)",
		},
		{
			name: "property removed from the document",
			doc: func(d map[string]any) {
				delete(props(d, "Payment"), "refunded")
				p := schemas(d)["Payment"].(map[string]any)
				var req []any
				for _, r := range p["required"].([]any) {
					if r != "refunded" {
						req = append(req, r)
					}
				}
				p["required"] = req
			},
			want: "Payment.refunded: in gateway.d.ts, not a property in api/openapi.json",
		},
		{
			name: "property made required",
			doc: func(d map[string]any) {
				na := schemas(d)["NextAction"].(map[string]any)
				na["required"] = append(na["required"].([]any), "url")
			},
			want: "NextAction.url: gateway.d.ts declares `url?: string;`, api/openapi.json gives `url: string;`",
		},
		{
			name: "property no longer nullable",
			doc: func(d map[string]any) {
				props(d, "Payment")["psp_reference"].(map[string]any)["type"] = "string"
			},
			want: "Payment.psp_reference: gateway.d.ts declares `psp_reference: string | null;`, api/openapi.json gives `psp_reference: string;`",
		},
		{
			name: "status added to the document",
			doc: func(d map[string]any) {
				ps := schemas(d)["PaymentStatus"].(map[string]any)
				ps["enum"] = append(ps["enum"].([]any), "refunded")
			},
			want: "PaymentStatus 'refunded': a value in api/openapi.json, missing from gateway.d.ts",
		},
		{
			name: "schema newly referenced",
			doc: func(d map[string]any) {
				props(d, "Payment")["refunds"] = map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/Refund"}}
			},
			want: "Refund: a schema of api/openapi.json the client uses, missing from gateway.d.ts",
		},
		{
			name: "description changed",
			doc: func(d map[string]any) {
				props(d, "Payment")["id"].(map[string]any)["description"] = "The payment's identifier."
			},
			want: "Payment.id: its comment is not the property's description",
		},
		{
			name: "keyword the generator cannot turn into a type",
			doc: func(d map[string]any) {
				props(d, "Problem")["errors"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}}}
			},
			want: `schema Problem: errors: json: unknown field "oneOf"`,
		},
		{
			name: "declaration edited by hand",
			dts:  func(s string) string { return strings.Replace(s, "  refunded: boolean;", "  refunded: string;", 1) },
			want: "Payment.refunded: gateway.d.ts declares `refunded: string;`, api/openapi.json gives `refunded: boolean;`",
		},
		{
			name: "property deleted by hand, its comment left",
			dts:  func(s string) string { return strings.Replace(s, "  refunded: boolean;\n", "", 1) },
			want: "Payment.refunded: a property in api/openapi.json, missing from gateway.d.ts (want `refunded: boolean;`)",
		},
		{
			name: "property added by hand",
			dts: func(s string) string {
				return strings.Replace(s, "  refunded: boolean;\n", "  refunded: boolean;\n  refunded_at?: string;\n", 1)
			},
			want: "Payment.refunded_at: in gateway.d.ts, not a property in api/openapi.json",
		},
		{
			name: "hand-written type names a property the schema lacks",
			dts: func(s string) string {
				return strings.Replace(s, "ConfirmPaymentRequest['order_id']", "ConfirmPaymentRequest['orderId']", 1)
			},
			want: "ConfirmPaymentRequest['orderId']: ConfirmPaymentRequest has no property orderId in api/openapi.json",
		},
		{
			name: "generated type declared again by hand",
			dts: func(s string) string {
				return "export interface NextAction {\n  type: string;\n}\n" + s
			},
			want: "NextAction: declared by hand, and generated from api/openapi.json",
		},
		{
			name: "section edited out of its layout",
			dts: func(s string) string {
				return strings.Replace(s, "export interface Problem {", "export interface Problem  {", 1)
			},
			want: `gateway.d.ts: line`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, s := doc, dts
			if tc.doc != nil {
				var m map[string]any
				if err := json.Unmarshal(doc, &m); err != nil {
					t.Fatal(err)
				}
				tc.doc(m)
				var err error
				if d, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dts != nil {
				s = tc.dts(dts)
			}
			ps := problems(d, s)
			for _, p := range ps {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Fatalf("no problem says %q; got:\n  %s", tc.want, strings.Join(ps, "\n  "))
		})
	}
}

// What render writes, parse reads back as it was.
func TestParseReadsRender(t *testing.T) {
	want, err := declarations(mustRead(t, docPath))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parse(render(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse(render(d)) is not d:\n got %+v\nwant %+v", got, want)
	}
}
