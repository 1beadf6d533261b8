package mysql_test

import (
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/payments"
	"gateway/webhooks"
)

// The webhook statements' scatters: the dispatcher's background scans and
// ops' look-up of an endpoint by id.
var webhookScatters = []scatter{
	{"the dispatcher's fan-out scan: events of every merchant not fanned out yet", "FanOut", "SELECT", "events", ""},
	{"the dispatcher's look for endpoints with due deliveries, of every merchant", "DueEndpoints", "SELECT", "webhook_deliveries", ""},
	{"delivery gauges: pending deliveries", "DeliveryBacklog", "SELECT", "webhook_deliveries", ""},
	{"delivery gauges: events not fanned out", "DeliveryBacklog", "SELECT", "events", ""},
	{"ops: a webhook endpoint by its id", "FindEndpoint", "SELECT", "webhook_endpoints", ""},
}

// webhookScenario runs the webhook store's methods: endpoints registered,
// rotated, disabled and enabled, an event fanned out, its delivery claimed,
// failed, claimed again and delivered, a resend, the gauges, a deletion.
func webhookScenario(sc *scenario, merchantID string) {
	t, ctx, s := sc.t, sc.ctx, sc.s
	ep := webhooks.Endpoint{ID: newID("we"), MerchantID: merchantID, URL: "https://shop.example/hooks",
		EventTypes: []string{webhooks.AllEvents}, Status: webhooks.Enabled, SecretEnc: []byte("sealed")}
	ep, err := s.CreateEndpoint(ctx, ep, webhooks.MaxEndpointsPerMerchant)
	sc.must(err, "CreateEndpoint")
	_, err = s.Endpoint(ctx, merchantID, ep.ID)
	sc.must(err, "Endpoint")
	_, err = s.Endpoints(ctx, merchantID)
	sc.must(err, "Endpoints")
	_, err = s.FindEndpoint(ctx, ep.ID)
	sc.must(err, "FindEndpoint")
	_, err = s.RotateSecret(ctx, merchantID, ep.ID, []byte("sealed again"), time.Hour)
	sc.must(err, "RotateSecret")
	for _, st := range []webhooks.EndpointStatus{webhooks.Disabled, webhooks.Enabled} {
		if changed, err := s.SetEndpointStatus(ctx, merchantID, ep.ID, st, "shard check"); err != nil || !changed {
			t.Fatalf("SetEndpointStatus(%s): %v, %v", st, changed, err)
		}
	}
	err = mysql.Transact(ctx, sc.setup, func(tx *sqlx.Tx) error {
		_, err := mysql.InsertEvent(ctx, tx, payments.Event{MerchantID: merchantID, Type: payments.EventPaymentSucceeded,
			ObjectType: payments.ObjectPayment, ObjectID: newID("pay"), Seq: 1, Data: []byte(`{}`)})
		return err
	})
	sc.must(err, "an event")
	if n, d, err := s.FanOut(ctx, 100); err != nil || n == 0 || d == 0 {
		t.Fatalf("FanOut: %d events, %d deliveries, %v", n, d, err)
	}
	refs, err := s.DueEndpoints(ctx, 10)
	sc.must(err, "DueEndpoints")
	if len(refs) != 1 {
		t.Fatalf("DueEndpoints: %v", refs)
	}
	cs, err := s.ClaimDeliveries(ctx, refs[0], 10, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatalf("ClaimDeliveries: %d, %v", len(cs), err)
	}
	c := cs[0]
	out, err := s.RecordFailed(ctx, c.Delivery, webhooks.Failure{HTTPStatus: 500, Error: "answered 500", Wait: 0,
		MaxAge: time.Hour, DisableAfter: time.Hour, DisableReason: "shard check"})
	if err != nil || !out.Recorded {
		t.Fatalf("RecordFailed: %+v, %v", out, err)
	}
	if cs, err = s.ClaimDeliveries(ctx, refs[0], 10, time.Minute); err != nil || len(cs) != 1 {
		t.Fatalf("ClaimDeliveries again: %d, %v", len(cs), err)
	}
	c = cs[0]
	if ok, err := s.RecordDelivered(ctx, c.Delivery, 200, time.Millisecond, true); err != nil || !ok {
		t.Fatalf("RecordDelivered: %v, %v", ok, err)
	}
	if ok, err := s.RecordDelivered(ctx, c.Delivery, 200, time.Millisecond, false); err != nil || ok {
		t.Fatalf("RecordDelivered again (fenced: delivered already): %v, %v", ok, err)
	}
	// The delivery log and a redelivery.
	if ds, _, err := s.Deliveries(ctx, webhooks.DeliveryQuery{MerchantID: merchantID, EndpointID: ep.ID, Limit: 1}); err != nil || len(ds) != 1 {
		t.Fatalf("Deliveries: %d, %v", len(ds), err)
	} else if _, _, err := s.Deliveries(ctx, webhooks.DeliveryQuery{MerchantID: merchantID, EventID: ds[0].EventID, Limit: 10, StartingAfter: ds[0].ID}); err != nil {
		t.Fatalf("Deliveries of the event: %v", err)
	} else {
		_, err = s.Delivery(ctx, merchantID, ds[0].ID)
		sc.must(err, "Delivery")
		_, err = s.EventType(ctx, merchantID, ds[0].EventID)
		sc.must(err, "EventType")
		_, _, err = s.Redeliver(ctx, webhooks.Redelivery{MerchantID: merchantID, EventID: ds[0].EventID, EndpointID: ep.ID, Key: "shard-check"})
		sc.must(err, "Redeliver")
		_, err = s.Redelivered(ctx, merchantID, "shard-check")
		sc.must(err, "Redelivered")
	}
	if n, err := s.Resend(ctx, merchantID, ep.ID, time.Now().Add(-time.Hour)); err != nil || n == 0 {
		t.Fatalf("Resend: %d, %v", n, err)
	}
	_, err = s.DeliveryBacklog(ctx)
	sc.must(err, "DeliveryBacklog")
	sc.must(s.DeleteEndpoint(ctx, merchantID, ep.ID), "DeleteEndpoint")
}
