package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/books"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
)

// Every problem with a books command is named at once, before anything is
// read or written.
func TestBooksReconcileRefusesABadPeriod(t *testing.T) {
	_, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP", "fake", "GATEWAY_BOOKS_PAGE", "9000"),
		"books", "reconcile", "--account", "fake", "--from", "2026-11-31", "--to", "yesterday")
	if exitCode(err) != exitUsage {
		t.Fatalf("exit %d (%v), want usage", exitCode(err), err)
	}
	for _, want := range []string{"--from", "--to", "GATEWAY_BOOKS_PAGE", "in-process fake"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the problems do not name %s:\n%v", want, err)
		}
	}
	_, _, err = runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP", "fakehttp", "GATEWAY_FAKEPSP_URL", "http://127.0.0.1:1"),
		"books", "reconcile", "--account", "fakehttp", "--from", "2026-11-30T00:00:00+09:00", "--to", "2026-11-29")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "after --from") {
		t.Fatalf("exit %d (%v), want a usage error for an empty period", exitCode(err), err)
	}
}

func TestParsePeriodEndReadsOffsetsAndDates(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-30":                    "2026-11-30T00:00:00Z",
		"2026-11-30T00:00:00+09:00":     "2026-11-29T15:00:00Z",
		"2026-11-30T23:59:59.999+09:00": "2026-11-30T14:59:59.999Z",
	} {
		got, err := parsePeriodEnd(in)
		if err != nil || got.Format("2006-01-02T15:04:05.999Z07:00") != want {
			t.Errorf("parsePeriodEnd(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// books reconcile against the standalone fake PSP: a charge the gateway has
// no record of is recorded and reported (exit 4, one JSON document, the
// CSV); the period is then refused without --again, and --again reports the
// same discrepancy and records nothing more.
func TestBooksReconcileReportsAndRecordsOnce(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	merchant, key, err := merchants.NewMerchant("Acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMerchant(context.Background(), merchant, key); err != nil {
		t.Fatal(err)
	}
	pspURL := fakeServer(t)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	body := fmt.Sprintf(`{"merchant_order_id": "ord_made_in_the_dashboard", "merchant_id": %q, "amount": 4200, "currency": "KRW", "created_at": %q}`,
		merchant.ID, day.Add(23*time.Hour+59*time.Minute).Format(time.RFC3339Nano))
	resp, err := http.Post(pspURL+"/admin/ledger/charges", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("planting the charge: %s", resp.Status)
	}
	csvPath := filepath.Join(t.TempDir(), "found.csv")
	vars := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx), "GATEWAY_PSP", "fakehttp", "GATEWAY_PSP_URL", pspURL)
	args := []string{"books", "reconcile", "--account", "fakehttp", "--from", day.Format(time.DateOnly), "--to", day.Add(24 * time.Hour).Format(time.DateOnly), "--json"}

	out, _, err := runCmd(t, vars, append(args, "--csv", csvPath)...)
	if exitCode(err) != exitDiscrepancies {
		t.Fatalf("exit %d (%v), want %d\n%s", exitCode(err), err, exitDiscrepancies, out)
	}
	var rep struct {
		Run struct {
			Status string       `json:"status"`
			Counts books.Counts `json:"counts"`
		} `json:"run"`
		Balanced      bool                `json:"balanced"`
		New           int                 `json:"new"`
		ByClass       map[books.Class]int `json:"by_class"`
		Discrepancies []discrepancyJSON   `json:"discrepancies"`
	}
	decodeOne(t, out, &rep)
	if rep.Run.Status != books.RunComplete || rep.Balanced || rep.New != 1 || rep.ByClass[books.OrphanCharge] != 1 ||
		len(rep.ByClass) != len(books.Classes) || len(rep.Discrepancies) != 1 || rep.Run.Counts.Lines != 1 {
		t.Fatalf("report %+v", rep)
	}
	d := rep.Discrepancies[0]
	if d.Action != books.ActionRecordedPayment || d.MerchantID != merchant.ID || d.PSPRecord == nil || d.PSPRecord.Amount != 4200 {
		t.Fatalf("discrepancy %+v", d)
	}
	p, err := st.PaymentByID(context.Background(), d.PaymentID)
	if err != nil || p.Status != payments.RequiresReview || p.Amount.Minor != 4200 {
		t.Fatalf("recorded payment %+v (%v)", p, err)
	}
	csvBytes, err := os.ReadFile(csvPath)
	if err != nil || !strings.Contains(string(csvBytes), "orphan_charge,recorded_payment,ord_made_in_the_dashboard,"+merchant.ID+","+d.PaymentID) {
		t.Fatalf("CSV (%v):\n%s", err, csvBytes)
	}

	if _, _, err := runCmd(t, vars, args...); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--again") {
		t.Fatalf("a second run: exit %d (%v), want usage naming --again", exitCode(err), err)
	}
	out, _, err = runCmd(t, vars, append(args, "--again")...)
	if exitCode(err) != exitDiscrepancies {
		t.Fatalf("--again: exit %d (%v)", exitCode(err), err)
	}
	decodeOne(t, out, &rep)
	if rep.New != 0 || len(rep.Discrepancies) != 1 || rep.Discrepancies[0].ID != d.ID {
		t.Fatalf("--again reported %+v, want the same discrepancy and nothing new", rep)
	}
	if n := mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM payments`); n != 1 {
		t.Fatalf("%d payments after --again", n)
	}
}
