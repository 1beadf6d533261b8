package versions

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const refund = `{"id":"re_1","amount":300,"status":"failed","decline_code":"insufficient_funds","metadata":{"a":"<b>"}}` + "\n"

func TestRenderTakesARefundBackAndForth(t *testing.T) {
	old, err := Render([]byte(refund), KindRefund, V20261202, V20261201)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"re_1","amount":300,"status":"failed","failure_code":"insufficient_funds","metadata":{"a":"<b>"}}` + "\n"
	if string(old) != want {
		t.Fatalf("in 2026-12-01:\n%s\nwant\n%s", old, want)
	}
	back, err := Render(old, KindRefund, V20261201, V20261202)
	if err != nil || string(back) != refund {
		t.Fatalf("back in 2026-12-02: %s, %v", back, err)
	}
	same, _ := Render([]byte(refund), KindRefund, Latest, Latest)
	if !bytes.Equal(same, []byte(refund)) {
		t.Fatal("a rendering in its own version changed")
	}
	payment := []byte(`{"id":"pay_1","decline_code":"do_not_honor"}`)
	if p, _ := Render(payment, KindPayment, V20261202, V20261201); !bytes.Equal(p, payment) {
		t.Fatalf("a payment's decline_code is not the refund's: %s", p)
	}
}

func TestRenderReachesRefundsInsideListsAndEvents(t *testing.T) {
	list := `{"object":"list","data":[` + strings.TrimSpace(refund) + `,{"id":"re_2","decline_code":null}],"has_more":false}`
	got, err := Render([]byte(list), KindRefundList, Latest, First)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "decline_code") || strings.Count(string(got), "failure_code") != 2 {
		t.Fatalf("list in 2026-12-01: %s", got)
	}
	event := `{"id":"evt_1","type":"refund.failed","object_type":"refund","data":` + strings.TrimSpace(refund) + `}`
	got, err = Render([]byte(event), KindEvent, Latest, First)
	if err != nil || !strings.Contains(string(got), `"failure_code":"insufficient_funds"`) {
		t.Fatalf("refund event in 2026-12-01: %s, %v", got, err)
	}
	paymentEvent := `{"id":"evt_2","object_type":"payment","data":{"decline_code":"x"}}`
	if got, _ := Render([]byte(paymentEvent), KindEvent, Latest, First); string(got) != paymentEvent {
		t.Fatalf("a payment event changed: %s", got)
	}
	if got, _ := Render([]byte(`{"type":"/problems/not-found","status":404}`), KindRefund, Latest, First); !json.Valid(got) {
		t.Fatalf("a problem in place of a refund: %s", got)
	}
	if got, _ := Render([]byte(`null`), KindRefund, Latest, First); string(got) != "null" {
		t.Fatalf("null: %s", got)
	}
}

func TestParseKnowsOnlyTheGatewaysVersions(t *testing.T) {
	for _, v := range All {
		if p, err := Parse(string(v)); err != nil || p != v {
			t.Errorf("Parse(%s): %s, %v", v, p, err)
		}
	}
	for _, bad := range []string{"", "2026-12-03", "2026-1-01", "latest", "2026-12-01 "} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
	if All[len(All)-1] != Latest || All[0] != First || len(Changes()) != len(All)-1 {
		t.Fatalf("versions %v, first %s, latest %s, %d changes", All, First, Latest, len(Changes()))
	}
	for i := 1; i < len(All); i++ {
		if All[i] <= All[i-1] {
			t.Fatalf("versions out of order: %v", All)
		}
	}
}

func TestDocumentOfTheFirstVersionNamesFailureCode(t *testing.T) {
	doc := []byte(`{"openapi":"3.1.0","info":{"version":"2026-12-02"},"components":{"schemas":{"Refund":{"required":["id","decline_code"],"properties":{"id":{},"decline_code":{"type":["string","null"]}}}}}}`)
	old, err := Document(doc, First)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Info       struct{ Version string }
		Components struct {
			Schemas map[string]struct {
				Required   []string
				Properties map[string]any
			}
		}
	}
	if err := json.Unmarshal(old, &d); err != nil {
		t.Fatal(err)
	}
	r := d.Components.Schemas["Refund"]
	if d.Info.Version != string(First) || r.Properties["failure_code"] == nil || r.Properties["decline_code"] != nil || r.Required[1] != "failure_code" {
		t.Fatalf("the first version's document: %s", old)
	}
	if latest, _ := Document(doc, Latest); !bytes.Equal(latest, doc) {
		t.Fatal("the latest document is not the one served")
	}
}
